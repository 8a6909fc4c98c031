"""Revision 0005 on a real SQLite file and the real PostgreSQL: xla_cpu rows an older
release stored as ``xla_cpu/1`` (shape "17") read back as ``xla_cpu/2`` rows (20, the
threshold at its default) in their own dtype; a decision stored before is still
served; the summary finds the default at width 20; downgrade is the inverse (rows
with another threshold, which ``xla_cpu/1`` cannot say, are deleted); and a "17" row
a not-yet-upgraded replica writes after the migration is read as today's row."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command
from storekit import gid, tile_graph

from xla_costmodel.service.core.best import choose
from xla_costmodel.service.store import (
    DecisionRecord,
    MeasurementBatch,
    MeasurementStore,
    codec,
)
from xla_costmodel.service.store.migrate import alembic_config
from xla_costmodel.service.store.rows import measurement_rows
from xla_costmodel.service.store.schema import decisions, graphs, measurements
from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.collections import get

TARGET = "cpu-a"
V1 = xla_cpu.sample(6, seed=3)  # row 0: XLA's default
TILE = np.arange(24, dtype=np.int8)[None]


def engine(store_url: str) -> sa.Engine:
    return sa.create_engine(store_url.replace("postgresql://", "postgresql+psycopg://"))


def old_batch(graph: str, configs: Any, **fields: Any) -> MeasurementBatch:
    base: dict[str, Any] = {
        "model": "xla_cpu",
        "model_version": "1",
        "collection": "xla_cpu",
        "target": TARGET,
        "graph_id": graph,
        "configs": configs,
        "runtimes_ns": np.arange(1, len(configs) + 1, dtype=np.int64) * 1000,
        "scores": None,
        "request_id": None,
        "source": "feedback",
    }
    return MeasurementBatch(**(base | fields))


def old_decision(graph: str, row: Any, refuted: Any, **fields: Any) -> dict[str, Any]:
    """A decisions row as the older release stored one (codec, shape "17")."""
    blobs, dtype, shape = codec.encode_configs(np.stack([row, refuted]))
    options = xla_cpu.to_options(row)
    return {
        "decided_at": datetime.now(UTC),
        "model": "xla_cpu",
        "model_version": "1",
        "collection": "xla_cpu",
        "target": TARGET,
        "compiler": "jax 0.10.2",
        "graph_id": graph,
        "hlo_fingerprint": None,
        "config": blobs[0],
        "config_dtype": dtype,
        "config_shape": shape,
        "compiler_options": json.dumps(options, sort_keys=True),
        "speedup": 1.3,
        "speedup_low": 1.2,
        "speedup_high": 1.4,
        "p_value": 0.01,
        "pairs": 8,
        "budget": 32,
        "strategy": "model",
        "kept_default": False,
        "writer": None,
        "request_id": None,
        "refuted_config": blobs[1],
        "refuted_reason": "slower",
        **fields,
    }


def decision_fields(graph: str, compiler: str) -> dict[str, Any]:
    return {
        "model": "xla_cpu",
        "model_version": "1",
        "collection": "xla_cpu",
        "target": TARGET,
        "compiler": compiler,
        "graph_id": graph,
        "compiler_options": {},
        "speedup": 1.3,
        "speedup_low": 1.2,
        "speedup_high": 1.4,
        "p_value": 0.01,
        "pairs": 8,
        "budget": 32,
        "strategy": "model",
        "kept_default": False,
    }


@pytest.fixture
def old_database(store_url: str) -> Iterator[str]:
    """A database at revision 0004 holding what the older release stored: xla_cpu
    measurements in int8 (feedback, compacted) and float32 (an import), a tile row,
    and a decision refuting another row; yields the graph id."""
    arrays = tile_graph(7)
    graph = gid(arrays)
    old = engine(store_url)
    with old.begin() as conn:
        command.upgrade(alembic_config(conn), "0004")
    with old.begin() as conn:
        conn.execute(
            graphs.insert(),
            {
                "graph_id": graph,
                "collection": "xla_cpu",
                "arrays": codec.encode_graph(arrays),
                "num_nodes": 12,
                "first_seen": datetime.now(UTC),
            },
        )
        rows = measurement_rows(old_batch(graph, V1.astype(np.int8)))
        rows += measurement_rows(old_batch(graph, V1[:2], source="import"))
        rows += measurement_rows(
            old_batch(graph, TILE, model="tile", collection="tile")
        )
        conn.execute(measurements.insert(), rows)
        conn.execute(decisions.insert(), old_decision(graph, *V1[1:3].astype(np.int8)))
    old.dispose()
    yield graph


def stored_shapes(store: MeasurementStore) -> list[tuple[str, str, str]]:
    m = measurements.c
    query = sa.select(m.collection, m.config_dtype, m.config_shape).order_by(m.id)
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(query)]


def test_rows_stored_at_17_read_back_at_20_and_the_decision_is_served(
    store_url: str, old_database: str
) -> None:
    graph = old_database
    store = MeasurementStore.open(store_url)  # migrates to head
    try:
        rows = store.measurements("xla_cpu", TARGET, graph)
        want = xla_cpu2.upgrade_v1_rows(np.concatenate([V1, V1[:2]]))
        np.testing.assert_array_equal(rows.configs, want)
        # Each row keeps its dtype; only xla_cpu rows change shape.
        assert stored_shapes(store) == [("xla_cpu", "|i1", "20")] * 6 + [
            ("xla_cpu", "<f4", "20")
        ] * 2 + [("tile", "|i1", "24")]
        np.testing.assert_array_equal(
            store.measurements("tile", TARGET, graph).configs, TILE
        )
        # The default (row 0, twice) is found at width 20.
        (summary,) = [s for s in store.graph_summaries() if s.collection == "xla_cpu"]
        assert (summary.measurements, summary.default_ns) == (8, 1000)
        (stored,) = store.decisions.for_graph("xla_cpu", TARGET, graph)
        np.testing.assert_array_equal(stored.config, xla_cpu2.upgrade_v1(V1[1]))
        assert stored.refuted_config is not None
        np.testing.assert_array_equal(stored.refuted_config, xla_cpu2.upgrade_v1(V1[2]))
        ruling = choose([stored], "jax 0.10.2", 1)
        assert ruling is not None and ruling.decision.id == stored.id
        options = get("xla_cpu").decision_options
        assert options is not None
        assert options(stored.config) == stored.compiler_options
        # The same row sent today as xla_cpu/2 is the same bytes.
        today = codec.encode_configs(xla_cpu2.upgrade_v1_rows(V1[1:2]).astype(np.int8))
        with store.engine.connect() as conn:
            d = conn.execute(sa.select(decisions.c.config, decisions.c.config_shape))
            assert tuple(d.one()) == (today[0][0], "20")
    finally:
        store.close()


def test_downgrade_is_the_inverse_for_default_thresholds(
    store_url: str, old_database: str
) -> None:
    graph = old_database
    store = MeasurementStore.open(store_url)
    # A row xla_cpu/1 cannot say (threshold 65536), measured and decided after
    # the upgrade, and refuted by a decision whose own row it can say.
    other = xla_cpu2.sample(3, seed=0)[1].astype(np.int8)
    store.add_measurements(old_batch(graph, other[None]))
    said = xla_cpu2.upgrade_v1(V1[4]).astype(np.int8)
    for compiler, row, refuted in (("c2", other, None), ("c3", said, other)):
        store.decisions.add(
            DecisionRecord(
                **decision_fields(graph, compiler),
                config=row,
                refuted_config=refuted,
                refuted_reason=None if refuted is None else "outputs",
            )
        )
    store.close()
    down = engine(store_url)
    with down.begin() as conn:
        command.downgrade(alembic_config(conn), "0004")
    with down.connect() as conn:
        m = measurements.c
        found = conn.execute(
            sa.select(m.collection, m.config, m.config_dtype, m.config_shape).where(
                m.collection == "xla_cpu"
            )
        ).all()
        decided = conn.execute(sa.select(decisions).order_by(decisions.c.id)).all()
    down.dispose()
    assert len(found) == 8 and {r.config_shape for r in found} == {"17"}
    configs = codec.decode_configs(
        [bytes(r.config) for r in found],
        [r.config_dtype for r in found],
        [r.config_shape for r in found],
    )
    np.testing.assert_array_equal(configs, np.concatenate([V1, V1[:2]]))
    first, kept = decided  # c2's decision of the 65536 row is gone
    assert first.config_shape == "17" and first.refuted_reason == "slower"
    assert bytes(first.config) == V1[1].astype(np.int8).tobytes()
    assert bytes(first.refuted_config) == V1[2].astype(np.int8).tobytes()
    assert (kept.compiler, kept.config_shape) == ("c3", "17")
    assert bytes(kept.config) == V1[4].astype(np.int8).tobytes()
    assert kept.refuted_config is None and kept.refuted_reason is None


def test_a_17_row_written_after_the_migration_reads_as_today(
    store_url: str, old_database: str
) -> None:
    """During a rolling upgrade a replica of the older release still writes "17"."""
    graph = old_database
    store = MeasurementStore.open(store_url)
    try:
        with store.engine.begin() as conn:
            conn.execute(
                measurements.insert(),
                measurement_rows(old_batch(graph, V1[3:4].astype(np.int8))),
            )
        rows = store.measurements("xla_cpu", TARGET, graph)
        assert rows.configs.shape == (9, xla_cpu2.WIDTH)
        np.testing.assert_array_equal(rows.configs[-1], xla_cpu2.upgrade_v1(V1[3]))
        by_graph = store.target_measurements("xla_cpu", TARGET, 100)
        np.testing.assert_array_equal(by_graph[graph].configs, rows.configs)
    finally:
        store.close()
