"""The decisions table on real SQLite and PostgreSQL: idempotent adds, the config
row round trip, and which decisions may be served."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from xla_costmodel.service.store import (
    DecisionRecord,
    IdempotencyKeyReused,
    MeasurementStore,
)
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
    assert again.response == {"a": 1, "decision_id": first.decision_id}
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
    assert served() == ["gone", "gone", "kept", None]
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
