"""The measurement store against real databases: SQLite files and PostgreSQL."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC
from typing import Any

import numpy as np
import pytest
from storekit import batch, gid, layout_configs, layout_graph, tile_graph

from xla_costmodel.service.store import (
    IdempotencyKeyReused,
    MeasurementStore,
    StoreUnavailable,
    UnknownGraph,
)


def saved_layout(store: MeasurementStore, seed: int = 0) -> str:
    arrays = layout_graph(seed)
    store.save_graph(gid(arrays), "layout", arrays)
    return gid(arrays)


def test_graphs_are_content_addressed_and_round_trip(store: MeasurementStore) -> None:
    arrays = layout_graph()
    graph = gid(arrays)
    assert not store.has_graph(graph)
    assert store.load_graph(graph) is None
    assert store.save_graph(graph, "layout", arrays) is True
    assert store.save_graph(graph, "layout", arrays) is False
    assert store.has_graph(graph)
    stored = store.load_graph(graph)
    assert stored is not None
    assert (stored.graph_id, stored.collection) == (graph, "layout")
    assert stored.first_seen.tzinfo is not None
    assert stored.first_seen.utcoffset() == UTC.utcoffset(None)
    assert set(stored.arrays) == set(arrays)
    for key, value in arrays.items():
        assert stored.arrays[key].dtype == value.dtype, key
        np.testing.assert_array_equal(stored.arrays[key], value)


def test_layout_measurements_round_trip_as_int8(store: MeasurementStore) -> None:
    graph = saved_layout(store)
    configs = layout_configs(64)
    result = store.add_measurements(batch(graph, configs))
    assert (result.stored, result.duplicate) == (64, False)
    got = store.measurements("layout", "tpu-v3", graph)
    assert got.configs.dtype == np.float32 and got.configs.shape == (64, 62, 18)
    np.testing.assert_array_equal(got.configs, configs.astype(np.float32))
    np.testing.assert_array_equal(got.runtimes_ns, np.arange(1, 65) * 1000)
    assert got.runtimes_ns.dtype == np.int64 and got.ids.dtype == np.int64
    assert np.isnan(got.scores).all()
    assert np.all(np.diff(got.ids) > 0)
    with store.engine.connect() as conn:  # int8 stays 1 byte per value
        dtype, shape, size = conn.exec_driver_sql(
            "SELECT config_dtype, config_shape, length(config) FROM measurements"
        ).first()  # type: ignore[misc]
    assert (dtype, shape, size) == ("|i1", "62,18", 62 * 18)


def test_tile_measurements_keep_scores_and_nulls(store: MeasurementStore) -> None:
    arrays = tile_graph()
    graph = gid(arrays)
    store.save_graph(graph, "tile", arrays)
    configs = np.random.default_rng(1).random((5, 24), dtype=np.float32) * 100
    scores = np.array([0.5, np.nan, -1.25, 3.0, np.nan], dtype=np.float32)
    runtimes = np.array([9, 8, 7, 6, 5], dtype=np.int64) * 10**6
    store.add_measurements(
        batch(graph, configs, scores=scores, runtimes_ns=runtimes, source="import")
    )
    got = store.measurements("tile", "tpu-v3", graph)
    np.testing.assert_array_equal(got.configs, configs)
    np.testing.assert_array_equal(got.runtimes_ns, runtimes)
    np.testing.assert_array_equal(got.scores, scores)  # NaN where null


def test_generation_changes_only_when_rows_are_added(store: MeasurementStore) -> None:
    graph = saved_layout(store)
    assert store.generation("layout", "tpu-v3", graph) == (0, 0)
    store.add_measurements(batch(graph, layout_configs(3)))
    first = store.generation("layout", "tpu-v3", graph)
    assert first[0] == 3
    store.measurements("layout", "tpu-v3", graph)
    store.add_measurements(batch(graph, layout_configs(2), target="tpu-v4"))
    assert store.generation("layout", "tpu-v3", graph) == first  # other target
    store.add_measurements(batch(graph, layout_configs(2)))
    second = store.generation("layout", "tpu-v3", graph)
    assert second[0] == 5 and second[1] > first[1]


def test_limit_returns_the_newest_rows_in_id_order(store: MeasurementStore) -> None:
    graph = saved_layout(store)
    configs = layout_configs(10)
    store.add_measurements(batch(graph, configs[:6]))
    store.add_measurements(batch(graph, configs[6:]))
    got = store.measurements("layout", "tpu-v3", graph, limit=4)
    np.testing.assert_array_equal(got.configs, configs[6:].astype(np.float32))
    assert list(got.runtimes_ns) == [1000, 2000, 3000, 4000]
    assert np.all(np.diff(got.ids) > 0)
    assert len(store.measurements("layout", "tpu-v3", graph, limit=100)) == 10
    empty = store.measurements("layout", "tpu-v9", graph)
    assert len(empty) == 0 and empty.configs.shape == (0,)


def test_keys_filter_by_collection_and_target(store: MeasurementStore) -> None:
    layout = saved_layout(store)
    arrays = tile_graph()
    tile = gid(arrays)
    store.save_graph(tile, "tile", arrays)
    store.add_measurements(batch(layout, layout_configs(2)))
    store.add_measurements(batch(layout, layout_configs(2), target="tpu-v4"))
    store.add_measurements(batch(tile, np.ones((3, 24), np.float32)))
    assert store.keys() == sorted(
        [
            ("layout", "tpu-v3", layout),
            ("layout", "tpu-v4", layout),
            ("tile", "tpu-v3", tile),
        ]
    )
    assert store.keys(collection="tile") == [("tile", "tpu-v3", tile)]
    assert store.keys(target="tpu-v4") == [("layout", "tpu-v4", layout)]
    assert store.keys("layout", "tpu-v3") == [("layout", "tpu-v3", layout)]
    assert store.keys("nope") == []


def test_a_resend_is_stored_once_and_replays_the_response(
    store: MeasurementStore,
) -> None:
    graph = saved_layout(store)
    response: dict[str, Any] = {"stored": 8, "quality": {"top1": 0.25}}
    sent = batch(
        graph,
        layout_configs(8),
        idempotency_key="tuner-1/42",
        request_hash="a" * 64,
        response=response,
    )
    assert store.add_measurements(sent).stored == 8
    again = store.add_measurements(sent)
    assert (again.stored, again.duplicate, again.response) == (0, True, response)
    assert store.generation("layout", "tpu-v3", graph)[0] == 8


def test_a_key_reused_for_another_request_conflicts(store: MeasurementStore) -> None:
    graph = saved_layout(store)
    first = batch(graph, layout_configs(2), idempotency_key="k", request_hash="a" * 64)
    store.add_measurements(first)
    other = batch(graph, layout_configs(2), idempotency_key="k", request_hash="b" * 64)
    with pytest.raises(IdempotencyKeyReused, match="different request"):
        store.add_measurements(other)
    assert store.generation("layout", "tpu-v3", graph)[0] == 2


def test_concurrent_resends_are_stored_once(store: MeasurementStore) -> None:
    graph = saved_layout(store)
    sent = batch(
        graph,
        layout_configs(16),
        idempotency_key="race",
        request_hash="c" * 64,
        response={"ok": True},
    )
    start = threading.Barrier(8)

    def send(_: int) -> tuple[int, bool]:
        start.wait()
        result = store.add_measurements(sent)
        return result.stored, result.duplicate

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(send, range(8)))
    assert sorted(results) == [(0, True)] * 7 + [(16, False)]
    assert store.generation("layout", "tpu-v3", graph)[0] == 16


def test_concurrent_writers_all_land(store: MeasurementStore) -> None:
    graph = saved_layout(store)
    start = threading.Barrier(6)

    def send(i: int) -> int:
        start.wait()
        total = 0
        for j in range(5):
            sent = batch(
                graph,
                layout_configs(8, seed=i),
                idempotency_key=f"{i}/{j}",
                request_hash="h",
            )
            total += store.add_measurements(sent).stored
        return total

    with ThreadPoolExecutor(6) as pool:
        assert sum(pool.map(send, range(6))) == 6 * 5 * 8
    got = store.measurements("layout", "tpu-v3", graph)
    assert len(got) == 240 and len(set(got.ids.tolist())) == 240


def test_measurements_of_an_unknown_graph_are_refused(store: MeasurementStore) -> None:
    with pytest.raises(UnknownGraph):
        store.add_measurements(batch("f" * 64, layout_configs(2)))
    with pytest.raises(UnknownGraph):  # a key is not recorded for a failed batch
        store.add_measurements(
            batch("f" * 64, layout_configs(2), idempotency_key="k", request_hash="h")
        )
    graph = saved_layout(store)
    ok = batch(graph, layout_configs(2), idempotency_key="k", request_hash="h")
    assert store.add_measurements(ok).stored == 2


MALFORMED = [
    ({"runtimes_ns": np.array([5, 0])}, "runtimes must be > 0"),
    ({"runtimes_ns": np.array([5])}, "runtimes_ns"),
    ({"scores": np.zeros(3, np.float32)}, "scores"),
    ({"source": "guess"}, "source"),
    ({"target": "x" * 129}, "target"),
    ({"configs": np.zeros((0, 62, 18), np.int8)}, "configs"),
]


def test_malformed_batches_are_value_errors(store: MeasurementStore) -> None:
    graph = saved_layout(store)
    for overrides, message in MALFORMED:
        fields = {"configs": layout_configs(2), **overrides}
        with pytest.raises(ValueError, match=message):
            store.add_measurements(batch(graph, **fields))
    assert store.generation("layout", "tpu-v3", graph) == (0, 0)


def test_migrations_are_recorded_and_reopening_is_fine(store_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from xla_costmodel.service.store.migrate import head_revision
    from xla_costmodel.service.store.schema import metadata

    first = MeasurementStore.open(store_url)
    second = MeasurementStore.open(store_url)
    third = MeasurementStore.open(store_url, migrate=False)
    with first.engine.connect() as conn:
        version = conn.exec_driver_sql("SELECT version_num FROM alembic_version")
        assert version.scalars().all() == [head_revision()]
        # The migrated schema is the one the queries are built from.
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    for opened in (first, second, third):
        opened.ping()
        opened.close()


def test_concurrent_opens_of_a_fresh_database_both_succeed(store_url: str) -> None:
    start = threading.Barrier(4)

    def open_store(_: int) -> str:
        start.wait()
        opened = MeasurementStore.open(store_url)
        try:
            opened.ping()
            return opened.dialect
        finally:
            opened.close()

    with ThreadPoolExecutor(4) as pool:
        dialects = list(pool.map(open_store, range(4)))
    assert len(set(dialects)) == 1


def test_a_schema_newer_than_the_code_is_unavailable(store_url: str) -> None:
    opened = MeasurementStore.open(store_url)
    with opened.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
    opened.close()
    for migrate in (True, False):
        with pytest.raises(StoreUnavailable, match=r"9999.*newer costmodel"):
            MeasurementStore.open(store_url, migrate=migrate)


def test_an_unmigrated_database_is_refused_without_migrate(store_url: str) -> None:
    with pytest.raises(StoreUnavailable, match="no costmodel schema"):
        MeasurementStore.open(store_url, migrate=False)
