"""Writers in the measurement store (real SQLite and PostgreSQL): tokens stored as
hashes, revocation, per-writer rows (limit, filter, purge), quotas, retention, and
the migration that added them to a database holding measurements."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command
from storekit import batch, gid, tile_graph

from xla_costmodel.service.store import (
    MeasurementStore,
    Quota,
    UnknownWriter,
    WriterExists,
    WriterQuotaExceeded,
)
from xla_costmodel.service.store.migrate import alembic_config
from xla_costmodel.service.store.schema import feedback_keys, graphs, measurements


def tile_configs(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 9, (count, 24)).astype(np.int8)


def saved(store: MeasurementStore, seed: int = 0) -> str:
    arrays = tile_graph(seed)
    store.save_graph(gid(arrays), "tile", arrays)
    return gid(arrays)


def test_a_token_is_shown_once_and_stored_as_its_hash(store: MeasurementStore) -> None:
    token = store.writers.create("tuner-1", ["tpu-v3", "tpu-v4"])
    assert token.startswith("cmw_") and len(token) > 40
    writer = store.writers.authenticate(token)
    assert writer is not None and writer.name == "tuner-1"
    assert writer.targets == ("tpu-v3", "tpu-v4") and writer.may_write("tpu-v4")
    assert not writer.may_write("cpu")
    with store.engine.connect() as conn:
        row = conn.execute(sa.text("SELECT * FROM writers")).one()
    assert token not in [str(v) for v in row]
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert store.writers.authenticate(token + "x") is None
    anyone = store.writers.create("ci")
    found = store.writers.authenticate(anyone)
    assert found is not None and found.targets is None and found.may_write("cpu")
    with pytest.raises(WriterExists):
        store.writers.create("ci")
    with pytest.raises(ValueError, match="writer name"):
        store.writers.create("no spaces")


def test_revoking_stops_the_token_and_frees_the_name(store: MeasurementStore) -> None:
    old = store.writers.create("tuner")
    store.writers.revoke("tuner")
    assert store.writers.authenticate(old) is None
    (listed,) = store.writers.list()
    assert listed.name == "tuner" and listed.revoked is not None
    with pytest.raises(UnknownWriter):
        store.writers.revoke("tuner")  # revoked already
    new = store.writers.create("tuner")  # a new token under the old name
    assert store.writers.authenticate(new) is not None
    assert store.writers.authenticate(old) is None


def test_rows_carry_their_writer_and_the_limit_is_per_writer(
    store: MeasurementStore,
) -> None:
    graph = saved(store)
    honest = tile_configs(5, seed=1)
    store.add_measurements(batch(graph, honest, writer="honest"))
    store.add_measurements(batch(graph, tile_configs(50, seed=2), writer="flood"))
    store.add_measurements(batch(graph, tile_configs(3, seed=3)))  # no writer
    everything = store.measurements("tile", "tpu-v3", graph)
    assert everything.writers == ("honest",) * 5 + ("flood",) * 50 + (None,) * 3
    newest = store.measurements("tile", "tpu-v3", graph, limit=10)
    # The flood keeps 10 rows; the others keep all theirs (fewer than 10), id order.
    assert newest.writers == ("honest",) * 5 + ("flood",) * 10 + (None,) * 3
    assert np.all(np.diff(newest.ids) > 0)
    assert np.array_equal(newest.configs[:5], honest)
    mine = store.measurements("tile", "tpu-v3", graph, writer="honest")
    assert len(mine) == 5 and set(mine.writers) == {"honest"}
    assert store.keys(writer="honest") == [("tile", "tpu-v3", graph)]
    assert store.keys(writer="nobody") == []


def test_purge_deletes_one_writers_rows_and_moves_the_generation(
    store: MeasurementStore,
) -> None:
    graph = saved(store)
    store.add_measurements(batch(graph, tile_configs(4, 1), writer="honest"))
    store.add_measurements(batch(graph, tile_configs(6, 2), writer="flood"))
    before = store.generation("tile", "tpu-v3", graph)
    assert store.writers.purge("flood") == 6
    assert store.generation("tile", "tpu-v3", graph) != before
    assert store.measurements("tile", "tpu-v3", graph).writers == ("honest",) * 4
    assert store.writers.purge("flood") == 0


def test_a_quota_bounds_each_writer_in_its_window(store: MeasurementStore) -> None:
    graph = saved(store)
    quota = Quota(rows=10, window_s=3600)
    store.add_measurements(batch(graph, tile_configs(8), writer="a", quota=quota))
    with pytest.raises(WriterQuotaExceeded) as refused:
        store.add_measurements(batch(graph, tile_configs(3), writer="a", quota=quota))
    assert 1 <= refused.value.retry_after_s <= 3601
    store.add_measurements(batch(graph, tile_configs(2), writer="a", quota=quota))
    store.add_measurements(batch(graph, tile_configs(9), writer="b", quota=quota))
    # A resend of a stored request is answered, not counted again.
    keyed = batch(
        graph,
        tile_configs(1),
        writer="b",
        quota=quota,
        idempotency_key="k1",
        request_hash="h",
        response={"stored": 1},
    )
    assert store.add_measurements(keyed).stored == 1
    assert store.add_measurements(keyed).duplicate
    assert len(store.measurements("tile", "tpu-v3", graph)) == 20


def test_prune_removes_old_unmeasured_graphs_and_old_keys(
    store: MeasurementStore,
) -> None:
    measured, unmeasured, recent = saved(store, 1), saved(store, 2), saved(store, 3)
    store.add_measurements(
        batch(measured, tile_configs(2), idempotency_key="old", request_hash="h")
    )
    store.add_measurements(
        batch(measured, tile_configs(2), idempotency_key="new", request_hash="h")
    )
    old = datetime.now(UTC) - timedelta(days=40)
    with store.engine.begin() as conn:
        stale = graphs.c.graph_id.in_([measured, unmeasured])
        conn.execute(graphs.update().where(stale).values(first_seen=old))
        conn.execute(
            feedback_keys.update()
            .where(feedback_keys.c.key == "old")
            .values(created=old)
        )
    assert store.prune(30 * 86400, 7 * 86400) == (1, 1)
    assert not store.has_graph(unmeasured)
    assert store.has_graph(measured) and store.has_graph(recent)
    with store.engine.connect() as conn:
        keys = conn.execute(sa.select(feedback_keys.c.key)).scalars().all()
    assert keys == ["new"]
    assert store.prune(0, 0) == (0, 0)  # 0: keep forever


def test_the_migration_keeps_earlier_rows_without_a_writer(store_url: str) -> None:
    engine = sa.create_engine(
        store_url.replace("postgresql://", "postgresql+psycopg://")
    )
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0001")
    arrays = tile_graph()
    with engine.begin() as conn:
        conn.execute(
            graphs.insert(),
            {
                "graph_id": gid(arrays),
                "collection": "tile",
                "arrays": b"x",
                "num_nodes": 12,
                "first_seen": datetime.now(UTC),
            },
        )
        conn.execute(
            sa.text(
                "INSERT INTO measurements (time, model, model_version, collection, "
                "target, graph_id, config, config_dtype, config_shape, runtime_ns, "
                "source) VALUES (:t, 'tile', '1', 'tile', 'tpu-v3', :g, :c, '|i1', "
                "'24', 5, 'feedback')"
            ),
            {
                "t": datetime.now(UTC).replace(tzinfo=None),
                "g": gid(arrays),
                "c": bytes(24),
            },
        )
    engine.dispose()
    store = MeasurementStore.open(store_url)  # migrates to head
    try:
        assert store.measurements("tile", "tpu-v3", gid(arrays)).writers == (None,)
        with store.engine.connect() as conn:
            assert (
                conn.execute(
                    sa.select(sa.func.count()).select_from(measurements)
                ).scalar()
                == 1
            )
    finally:
        store.close()


def test_a_postgres_scheme_url_opens_like_postgresql(postgres_url: str) -> None:
    """``postgres://`` (what Heroku-style providers hand out) is PostgreSQL too."""
    store = MeasurementStore.open(postgres_url.replace("postgresql://", "postgres://"))
    try:
        assert store.dialect == "postgresql"
        store.ping()
    finally:
        store.close()
