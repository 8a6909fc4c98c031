"""The decisions table on real SQLite and PostgreSQL: idempotent adds, the config
row round trip, which decisions may be served, the measurements a decision stores
with it (one transaction), one decision per writer and program, and the quota."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from storekit import batch, tile_graph
from storekit import gid as graph_id_of

from xla_costmodel.service.store import (
    DecisionRecord,
    IdempotencyKeyReused,
    MeasurementStore,
    Quota,
    UnknownGraph,
    WriterQuotaExceeded,
)
from xla_costmodel.service.store.decisions import Unmeasured
from xla_costmodel.service.store.writers import WriterNameInUse

GRAPH = "ab" * 32


def record(config: Any, **fields: Any) -> DecisionRecord:
    base: dict[str, Any] = {
        "model": "layout",
        "model_version": "1",
        "collection": "layout",
        "target": "tpu-v3",
        "compiler": "c1",
        "graph_id": GRAPH,
        "config": np.asarray(config),
        "compiler_options": {"flag": True},
        "speedup": 1.5,
        "speedup_low": 1.2,
        "speedup_high": None,
        "p_value": 0.02,
        "pairs": 4,
        "budget": 8,
        "strategy": "model",
        "kept_default": False,
    }
    return DecisionRecord(**{**base, **fields})


def test_a_keyed_decision_is_stored_once(store: MeasurementStore) -> None:
    rows = np.arange(36, dtype=np.int8).reshape(2, 18)  # per node: [NC, 18]
    keyed = record(rows, idempotency_key="k", request_hash="h", response={"a": 1})
    first = store.decisions.add(keyed)
    again = store.decisions.add(keyed)
    assert (first.duplicate, again.duplicate) == (False, True)
    assert again.response == {
        "a": 1,
        "decision_id": first.decision_id,
        "replaced": False,
    }
    with pytest.raises(IdempotencyKeyReused):
        store.decisions.add(record(rows, idempotency_key="k", request_hash="other"))
    (stored,) = store.decisions.for_graph("layout", "tpu-v3", GRAPH)
    assert stored.id == first.decision_id and stored.config.shape == (2, 18)
    np.testing.assert_array_equal(stored.config, rows.astype(np.float32))
    assert stored.compiler_options == {"flag": True} and stored.decided_at.tzinfo
    assert store.decisions.counts() == {("layout", "layout", "tpu-v3"): 1}


def test_only_servable_writers_decisions_are_read(store: MeasurementStore) -> None:
    store.writers.create("kept", ["tpu-v3"])
    store.writers.create("revoked")
    store.writers.create("elsewhere", ["cpu"])
    for writer in (None, "kept", "revoked", "elsewhere", "unknown"):
        store.decisions.add(record([[1.0] * 18], writer=writer))
    store.writers.revoke("revoked")
    found = store.decisions.for_graph("layout", "tpu-v3", GRAPH)
    assert [d.writer for d in found] == [None, "kept"]
    assert store.decisions.for_graph("layout", "cpu", GRAPH) == []
    with pytest.raises(ValueError, match="speedup"):
        store.decisions.add(record([[1.0] * 18], speedup_low=2.0))


def test_a_purge_deletes_the_writers_decisions(store: MeasurementStore) -> None:
    """Else ``GET /v1/best`` goes on serving what a removed writer decided."""

    def served() -> list[str | None]:
        return [d.writer for d in store.decisions.for_graph("layout", "tpu-v3", GRAPH)]

    store.writers.create("gone")
    store.writers.create("kept")
    for writer in ("gone", "gone", "kept", None):
        store.decisions.add(record([[1.0] * 18], writer=writer))
    assert served() == ["gone", "kept", None]  # its second replaced its first
    assert store.writers.purge("gone") == 0  # it stored no measurements
    assert served() == ["kept", None]
    store.writers.purge("anonymous")  # the decisions stored without a token
    assert served() == ["kept"]
    assert store.decisions.counts() == {("layout", "layout", "tpu-v3"): 1}


def test_a_revoked_name_with_decisions_is_not_given_to_a_new_writer(
    store: MeasurementStore,
) -> None:
    """Revoked, its decisions are hidden; a new token under its name would serve
    them again, so the name stays taken until they are purged."""
    store.writers.create("gone")
    store.decisions.add(record([[1.0] * 18], writer="gone"))
    store.writers.revoke("gone")
    with pytest.raises(WriterNameInUse, match="1 decisions still carry its name"):
        store.writers.create("gone")
    store.writers.purge("gone")
    assert store.writers.create("gone").startswith("cmw_")


# -- a decision is measured, one per writer and program, within the quota ----------


def tile_decision(graph: str, **fields: Any) -> DecisionRecord:
    """A tile decision whose 3 pairs are stored as 3 measurement rows."""
    row = np.arange(24, dtype=np.float32)
    pairs = batch(
        graph,
        np.stack([row] * 3),
        writer=fields.get("writer"),
        compiler=fields.get("compiler", "c1"),
    )
    base: dict[str, Any] = {
        "model": "tile",
        "collection": "tile",
        "graph_id": graph,
        "config": row,
        "compiler_options": {},
        "measurements": pairs,
    }
    return record(**{**base, **fields})


def test_a_decisions_pairs_are_stored_with_it_or_neither_is(
    store: MeasurementStore,
) -> None:
    arrays = tile_graph(seed=3)
    graph = graph_id_of(arrays)
    with pytest.raises(UnknownGraph):  # the graph is not stored: nothing is
        store.decisions.add(tile_decision(graph, writer=None))
    assert store.decisions.for_graph("tile", "tpu-v3", graph) == []
    assert store.generation("tile", "tpu-v3", graph) == (0, 0)
    store.save_graph(graph, "tile", arrays)
    added = store.decisions.add(tile_decision(graph, writer=None))
    assert not added.replaced
    assert store.generation("tile", "tpu-v3", graph)[0] == 3
    rows = store.measurements("tile", "tpu-v3", graph)
    assert rows.compilers == ("c1",) * 3 and rows.writers == (None,) * 3


def test_the_newer_decision_replaces_the_older_of_the_same_program(
    store: MeasurementStore,
) -> None:
    """Per (writer, collection, target, graph, compiler), NULL-safe for anonymous
    writers and unknown compilers."""
    store.writers.create("w")
    for writer in (None, "w"):
        for compiler in (None, "c1", "c2"):
            first = store.decisions.add(
                record([[1.0] * 18], writer=writer, compiler=compiler)
            )
            again = store.decisions.add(
                record([[2.0] * 18], writer=writer, compiler=compiler)
            )
            assert (first.replaced, again.replaced) == (False, True)
    found = store.decisions.for_graph("layout", "tpu-v3", GRAPH)
    assert len(found) == 6 and all(d.config[0, 0] == 2.0 for d in found)
    assert {(d.writer, d.compiler) for d in found} == {
        (w, c) for w in (None, "w") for c in (None, "c1", "c2")
    }


def test_a_kept_default_needs_the_writers_measurements_of_the_graph(
    store: MeasurementStore,
) -> None:
    arrays = tile_graph(seed=4)
    graph = graph_id_of(arrays)
    store.save_graph(graph, "tile", arrays)
    store.writers.create("other")
    store.writers.create("tuner")
    store.add_measurements(batch(graph, np.zeros((1, 24), np.float32), writer="other"))
    kept = record(
        np.zeros(24, np.float32),
        model="tile",
        collection="tile",
        graph_id=graph,
        kept_default=True,
        compiler_options={},
        measured_before=True,
        writer="tuner",
    )
    with pytest.raises(Unmeasured):  # another writer's rows are not its own
        store.decisions.add(kept)
    store.add_measurements(batch(graph, np.zeros((1, 24), np.float32), writer="tuner"))
    assert store.decisions.add(kept).decision_id > 0


def test_decisions_and_their_rows_count_against_the_quota(
    store: MeasurementStore,
) -> None:
    arrays = tile_graph(seed=5)
    graph = graph_id_of(arrays)
    store.save_graph(graph, "tile", arrays)
    store.writers.create("q")
    quota = Quota(rows=9, window_s=3600)
    for compiler in ("a", "b"):  # 1 decision + 3 rows each: 8 of 9
        store.decisions.add(
            tile_decision(graph, writer="q", compiler=compiler, quota=quota)
        )
    with pytest.raises(WriterQuotaExceeded):
        store.decisions.add(tile_decision(graph, writer="q", compiler="c", quota=quota))
    with pytest.raises(WriterQuotaExceeded):  # a bare decision is a row too
        store.decisions.add(record([[1.0] * 18], writer="q", quota=Quota(8, 3600)))
    assert len(store.decisions.for_graph("tile", "tpu-v3", graph)) == 2
    assert store.generation("tile", "tpu-v3", graph)[0] == 6


def test_refutations_and_fingerprints_round_trip(store: MeasurementStore) -> None:
    mine, other = np.full((2, 18), 3, np.int8), np.full((2, 18), 1.5, np.float32)
    store.decisions.add(
        record(
            mine,
            hlo_fingerprint="f" * 64,
            refuted_config=other,
            refuted_reason="outputs",
        )
    )
    store.decisions.add(
        record(
            mine,
            graph_id="cd" * 32,
            hlo_fingerprint="f" * 64,
            writer=None,
            compiler="c2",
        )
    )
    found = store.decisions.for_fingerprint("layout", "tpu-v3", "f" * 64)
    assert [d.graph_id for d in found] == [GRAPH, "cd" * 32]
    assert found[0].refuted_reason == "outputs"
    np.testing.assert_array_equal(found[0].refuted_config, other)
    assert found[1].refuted_config is None and found[1].refuted_reason is None
    with pytest.raises(ValueError, match="refuted"):
        store.decisions.add(record(mine, refuted_config=other))


def test_a_purge_revokes_the_writers_token(store: MeasurementStore) -> None:
    """Else the purged writer stores again at once (and its name stays taken)."""
    token = store.writers.create("gone")
    assert store.writers.authenticate(token) is not None
    store.writers.purge("gone")
    assert store.writers.authenticate(token) is None
    assert store.writers.create("gone").startswith("cmw_")  # nothing carries it
