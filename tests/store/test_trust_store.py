"""Issue 27 at the store (real SQLite and PostgreSQL): one writer's quota holds under
concurrency, the graphs it archives are capped, idempotency keys are per writer,
and a revoked writer's name is not handed to someone else while its rows exist."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest
from storekit import batch, gid, tile_graph

from xla_costmodel.service.store import (
    IdempotencyKeyReused,
    MeasurementBatch,
    MeasurementStore,
    Quota,
    WriterExists,
    WriterQuotaExceeded,
)
from xla_costmodel.service.store.codec import encode_graph
from xla_costmodel.service.store.records import GraphRow


def configs(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((count, 24)).astype(np.float32)


def test_concurrent_batches_of_one_writer_cannot_pass_its_quota_on_postgresql(
    postgres_url: str,
) -> None:
    """32 requests of 900 rows at once against a quota of 1,000: count-then-insert
    under READ COMMITTED let 27 of them through (24,300 rows) before the
    per-writer advisory lock; now one passes."""
    stores = [MeasurementStore.open(postgres_url) for _ in range(4)]  # 4 replicas
    graph = tile_graph()
    stores[0].save_graph(gid(graph), "tile", graph)
    quota = Quota(rows=1000, window_s=3600)
    start = threading.Barrier(32)
    outcomes: list[str] = []

    def send(i: int) -> None:
        b = batch(gid(graph), configs(900, i), writer="flood", quota=quota)
        start.wait()
        try:
            stores[i % 4].add_measurements(b)
            outcomes.append("stored")
        except WriterQuotaExceeded:
            outcomes.append("429")

    threads = [threading.Thread(target=send, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        stored = len(stores[0].measurements("tile", "tpu-v3", gid(graph)))
    finally:
        for s in stores:
            s.close()
    assert stored <= quota.rows, f"{stored} rows stored past a quota of 1,000"
    assert outcomes.count("stored") == 1 and len(outcomes) == 32


def row(arrays: dict[str, np.ndarray]) -> GraphRow:
    return GraphRow(
        gid(arrays),
        "tile",
        encode_graph(arrays),
        int(arrays["node_feat"].shape[0]),
        datetime.now(UTC),
    )


def with_graph(b: MeasurementBatch, arrays: dict[str, np.ndarray]) -> MeasurementBatch:
    return replace(b, graph=row(arrays))


def test_a_writers_archived_graph_bytes_are_capped(store: MeasurementStore) -> None:
    first, second = tile_graph(1, 200), tile_graph(2, 200)
    cap = len(row(first).arrays) + len(row(second).arrays) // 2
    quota = Quota(rows=10_000, window_s=3600, graph_bytes=cap)
    b = with_graph(batch(gid(first), configs(2), writer="w", quota=quota), first)
    assert store.add_measurements(b).stored == 2
    assert store.has_graph(gid(first))
    b = with_graph(batch(gid(second), configs(2), writer="w", quota=quota), second)
    with pytest.raises(WriterQuotaExceeded, match="archived"):
        store.add_measurements(b)
    assert not store.has_graph(gid(second))
    other = with_graph(batch(gid(second), configs(2), writer="v", quota=quota), second)
    assert store.add_measurements(other).stored == 2  # another writer's own cap


def test_idempotency_keys_are_per_writer(store: MeasurementStore) -> None:
    graph = tile_graph()
    store.save_graph(gid(graph), "tile", graph)

    def send(writer: str, request_hash: str) -> tuple[int, bool]:
        b = batch(
            gid(graph),
            configs(3),
            writer=writer,
            idempotency_key="run-1",
            request_hash=request_hash,
            response={"stored": 3, "writer": writer},
        )
        added = store.add_measurements(b)
        return added.stored, added.duplicate

    assert send("a", "h1") == (3, False)
    # Before: "b" got "a"'s answer back (nothing stored), or 422 with another body.
    assert send("b", "h1") == (3, False)
    with pytest.raises(IdempotencyKeyReused, match="'run-1'"):
        send("b", "h2")  # within one writer, a key still names one request
    assert send("a", "h1") == (0, True)
    assert len(store.measurements("tile", "tpu-v3", gid(graph))) == 6


def test_a_revoked_name_is_not_reused_while_its_rows_exist(
    store: MeasurementStore,
) -> None:
    graph = tile_graph()
    store.save_graph(gid(graph), "tile", graph)
    store.writers.create("tuner-a")
    store.add_measurements(batch(gid(graph), configs(2), writer="tuner-a"))
    store.writers.revoke("tuner-a")
    with pytest.raises(WriterExists, match="purge"):
        store.writers.create("tuner-a")
    assert store.writers.purge("tuner-a") == 2
    assert store.writers.create("tuner-a").startswith("cmw_")
