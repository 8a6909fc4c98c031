"""Tuning decisions: what a tuner kept for a program, who decided it, and the
measurements it rests on.

    DecisionTable.add(decision) -> DecisionAdded      one transaction: the decision,
                                                      its paired measurements, the
                                                      writer's older one replaced
    DecisionTable.for_graph(collection, target, gid) -> [StoredDecision]
    DecisionTable.for_fingerprint(collection, target, hlo_fingerprint) -> [...]
    DecisionTable.counts() -> {(model, collection, target): decisions}

A decision's config row is stored as a measurement's config is (``codec``: raw
little-endian bytes with dtype and shape), with the row it refutes (if any) in the
same dtype and shape; its compiler options (derived from the row by the core) as a
JSON object. ``add`` stores the decision's paired runtimes as the writer's
measurements in the same transaction, counts both against the writer's quota, and
replaces the writer's older decision of the same (collection, target, graph,
compiler): one decision per writer and program. ``for_graph`` and
``for_fingerprint`` answer only decisions that may be served: anonymous ones (stored
with feedback auth off; the caller decides whether they are served now) and those
of writers that are not revoked and may (still) write the target; a revoked
writer's rows stay, as its measurements do, until a purge deletes both
(``WriterTable.purge``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import (
    ColumnElement,
    Connection,
    Table,
    and_,
    delete,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.sql.dml import Insert

from xla_costmodel.service.store import codec
from xla_costmodel.service.store.errors import StoreError, UnknownGraph
from xla_costmodel.service.store.keys import replayed
from xla_costmodel.service.store.records import MAX_LENGTHS, MeasurementBatch, Quota
from xla_costmodel.service.store.rows import decoded_configs, measurement_rows
from xla_costmodel.service.store.schema import (
    decisions,
    feedback_keys,
    graphs,
    measurements,
    writers,
)
from xla_costmodel.service.store.writers import (
    ANONYMOUS,
    Transaction,
    check_quota,
    lock,
    scoped_key,
)

OptionValue = str | int | float | bool
MAX_STRATEGY = 16
REFUTATIONS = ("slower", "outputs")


class Unmeasured(StoreError):
    """A kept default of a graph its writer has no measurements of on the target."""


@dataclass(frozen=True, kw_only=True)
class DecisionRecord:
    """One decision to store. With an ``idempotency_key``, a resend with the same
    ``request_hash`` stores nothing and gets the first ``response`` back (the
    store sets its ``decision_id`` and ``replaced``)."""

    model: str
    model_version: str
    collection: str
    target: str
    compiler: str | None  # None: unknown
    graph_id: str
    config: np.ndarray[Any, Any]  # one config: [width], or [NC, width] per node
    compiler_options: dict[str, OptionValue]
    speedup: float
    speedup_low: float
    speedup_high: float | None
    p_value: float | None
    pairs: int
    budget: int
    strategy: str
    kept_default: bool
    writer: str | None = None  # None: feedback auth off
    request_id: str | None = None
    hlo_fingerprint: str | None = None  # clients.xla.reuse.fingerprint
    idempotency_key: str | None = None
    request_hash: str | None = None
    response: dict[str, Any] | None = None
    refuted_config: np.ndarray[Any, Any] | None = None  # config's shape
    refuted_reason: str | None = None  # "slower" | "outputs" with refuted_config
    # The paired runtimes as the writer's measurement rows of this graph (the
    # graph must be stored: else ``UnknownGraph``).
    measurements: MeasurementBatch | None = None
    # A kept default: the writer must have measured the graph on the target
    # before (else ``Unmeasured``).
    measured_before: bool = False
    quota: Quota | None = None  # the writer's: decision + measurement rows

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first thing wrong with the record."""
        for name, limit in {**MAX_LENGTHS, "strategy": MAX_STRATEGY}.items():
            value = getattr(self, name, None)
            if value is not None and not (0 < len(value) <= limit):
                raise ValueError(f"{name}: expected 1 to {limit} characters")
        if not 0 < self.speedup_low <= self.speedup < math.inf:
            raise ValueError("speedup: expected 0 < speedup_low <= speedup < inf")
        if min(self.pairs, self.budget) < 0:
            raise ValueError("pairs, budget: expected >= 0")
        if (self.refuted_config is None) != (self.refuted_reason is None):
            raise ValueError("refuted_config and refuted_reason come together")
        if self.refuted_reason is not None and self.refuted_reason not in REFUTATIONS:
            raise ValueError(f"refuted_reason: expected one of {REFUTATIONS}")
        if self.refuted_config is not None and (
            np.shape(self.refuted_config) != np.shape(self.config)
        ):
            raise ValueError("refuted_config: expected the config's shape")
        if self.measurements is not None:
            self.measurements.validate()
            if self.measurements.graph_id != self.graph_id:
                raise ValueError("measurements: expected the decision's graph")


@dataclass(frozen=True)
class DecisionAdded:
    decision_id: int
    duplicate: bool  # the key was seen before with the same hash; nothing stored
    response: dict[str, Any] | None  # the first answer, for a duplicate
    replaced: bool = False  # the writer's older decision of the program went


@dataclass(frozen=True, kw_only=True)
class StoredDecision:
    id: int
    decided_at: datetime
    model: str
    model_version: str
    compiler: str | None
    graph_id: str
    hlo_fingerprint: str | None
    config: np.ndarray[Any, Any]  # float32, the stored row's shape
    compiler_options: dict[str, OptionValue]
    speedup: float
    speedup_low: float
    speedup_high: float | None
    p_value: float | None
    pairs: int
    budget: int
    strategy: str
    kept_default: bool
    writer: str | None
    refuted_config: np.ndarray[Any, Any] | None = None  # float32, config's shape
    refuted_reason: str | None = None


InsertIgnore = Callable[[Table, str], Insert]


class DecisionTable:
    """The ``decisions`` table, through the store's transactions."""

    def __init__(self, transaction: Transaction, insert_ignore: InsertIgnore) -> None:
        self._transaction = transaction
        self._insert_ignore = insert_ignore

    def add(self, decision: DecisionRecord) -> DecisionAdded:
        """Store one decision and its measurements in one transaction, replacing
        the writer's older decision of the same program. Raises
        ``IdempotencyKeyReused`` (its key came before with another request hash),
        ``UnknownGraph`` (measurements of a graph not stored), ``Unmeasured``,
        ``WriterQuotaExceeded``."""
        decision.validate()
        row = _row(decision)
        batch = decision.measurements
        rows = [] if batch is None else measurement_rows(batch)
        key = decision.idempotency_key
        if key is not None:  # one writer's key never replays another's
            key = scoped_key(key, decision.writer)
        with self._transaction("storing a decision", write=True) as conn:
            # Serialised per writer (PostgreSQL): its quota and its one decision
            # per program hold under concurrent requests.
            lock(conn, decision.writer or ANONYMOUS)
            if key is not None:
                seen = self._claim(conn, key, decision.request_hash)
                if seen is not None:
                    return seen
            _check_measured(conn, decision, bool(rows))
            if decision.quota is not None and decision.writer is not None:
                check_quota(conn, decision.writer, 1 + len(rows), decision.quota)
            gone = conn.execute(delete(decisions).where(_same_program(decision)))
            replaced = bool(gone.rowcount)
            inserted = conn.execute(decisions.insert().returning(decisions.c.id), row)
            decision_id = int(inserted.scalar_one())
            if rows:
                conn.execute(measurements.insert(), rows)
            if key is not None:
                response = {
                    **(decision.response or {}),
                    "decision_id": decision_id,
                    "replaced": replaced,
                }
                conn.execute(
                    update(feedback_keys)
                    .where(feedback_keys.c.key == key)
                    .values(response=json.dumps(response))
                )
        return DecisionAdded(decision_id, False, None, replaced)

    def for_graph(
        self, collection: str, target: str, graph_id: str
    ) -> list[StoredDecision]:
        """The servable decisions of one graph on one target, oldest first."""
        return self._servable(collection, target, decisions.c.graph_id == graph_id)

    def for_fingerprint(
        self, collection: str, target: str, fingerprint: str
    ) -> list[StoredDecision]:
        """The servable decisions stored with HLO ``fingerprint`` on ``target``,
        whatever graph they name, oldest first."""
        where = decisions.c.hlo_fingerprint == fingerprint
        return self._servable(collection, target, where)

    def counts(self) -> dict[tuple[str, str, str], int]:
        """Decisions stored per (model, collection, target); one aggregate query."""
        d = decisions.c
        query = select(d.model, d.collection, d.target, func.count()).group_by(
            d.model, d.collection, d.target
        )
        with self._transaction("counting decisions") as conn:
            return {(m, c, t): int(n) for m, c, t, n in conn.execute(query)}

    def _servable(
        self, collection: str, target: str, which: ColumnElement[bool]
    ) -> list[StoredDecision]:
        d, w = decisions.c, writers.c
        active = and_(w.name.is_not(None), w.revoked.is_(None))
        query = (
            select(decisions, w.targets.label("writer_targets"))
            .select_from(decisions.outerjoin(writers, d.writer == w.name))
            .where(d.collection == collection, d.target == target, which)
            .where(or_(d.writer.is_(None), active))
            .order_by(d.id)
        )
        with self._transaction("reading decisions") as conn:
            rows = conn.execute(query).all()
        return [_stored(r) for r in rows if _may_write(r.writer_targets, target)]

    def _claim(
        self, conn: Connection, key: str, request_hash: str | None
    ) -> DecisionAdded | None:
        """Take ``key`` for this request, or the first answer if it was taken. The
        key row goes in before the decision: a concurrent resend waits on it."""
        seen = replayed(conn, key, request_hash)
        if seen is None:
            row = {
                "key": key,
                "request_hash": request_hash or "",
                "response": None,
                "created": datetime.now(UTC),
            }
            inserted = conn.execute(self._insert_ignore(feedback_keys, "key"), row)
            if inserted.first() is not None:
                return None
            seen = replayed(conn, key, request_hash)  # a concurrent request won
            if seen is None:
                raise StoreError("idempotency key vanished during a race")
        response = seen.response or {}
        return DecisionAdded(
            int(response.get("decision_id", 0)),
            True,
            response,
            bool(response.get("replaced", False)),
        )


def _is(column: Any, value: str | None) -> ColumnElement[bool]:
    """NULL-safe equality (anonymous writers, unknown compilers)."""
    return column.is_(None) if value is None else column == value  # type: ignore[no-any-return]


def _same_program(decision: DecisionRecord) -> ColumnElement[bool]:
    """The writer's decisions of the same (collection, target, graph, compiler)."""
    d = decisions.c
    return and_(
        _is(d.writer, decision.writer),
        d.collection == decision.collection,
        d.target == decision.target,
        d.graph_id == decision.graph_id,
        _is(d.compiler, decision.compiler),
    )


def _check_measured(conn: Connection, decision: DecisionRecord, rows: bool) -> None:
    """The graph of measurement rows is stored; a kept default's writer measured
    the graph on the target before (one indexed query each)."""
    if rows:
        query = select(graphs.c.graph_id).where(graphs.c.graph_id == decision.graph_id)
        if conn.execute(query).first() is None:
            raise UnknownGraph(f"graph {decision.graph_id} is not stored")
    if decision.measured_before:
        m = measurements.c
        query = (
            select(m.id)
            .where(m.collection == decision.collection, m.target == decision.target)
            .where(m.graph_id == decision.graph_id, _is(m.writer, decision.writer))
            .limit(1)
        )
        if conn.execute(query).first() is None:
            raise Unmeasured(
                f"no measurements of graph {decision.graph_id} on target "
                f"{decision.target!r} by this writer"
            )


def _row(decision: DecisionRecord) -> dict[str, Any]:
    config = np.asarray(decision.config)
    batch = config[None]
    if decision.refuted_config is not None:  # one dtype and shape for both
        batch = np.stack([config, np.asarray(decision.refuted_config)])
    blobs, dtype, shape = codec.encode_configs(batch)
    return {
        "decided_at": datetime.now(UTC),
        "model": decision.model,
        "model_version": decision.model_version,
        "collection": decision.collection,
        "target": decision.target,
        "compiler": decision.compiler,
        "graph_id": decision.graph_id,
        "hlo_fingerprint": decision.hlo_fingerprint,
        "config": blobs[0],
        "config_dtype": dtype,
        "config_shape": shape,
        "compiler_options": json.dumps(decision.compiler_options, sort_keys=True),
        "speedup": decision.speedup,
        "speedup_low": decision.speedup_low,
        "speedup_high": decision.speedup_high,
        "p_value": decision.p_value,
        "pairs": decision.pairs,
        "budget": decision.budget,
        "strategy": decision.strategy,
        "kept_default": decision.kept_default,
        "writer": decision.writer,
        "request_id": decision.request_id,
        "refuted_config": blobs[1] if len(blobs) > 1 else None,
        "refuted_reason": decision.refuted_reason,
    }


def _may_write(targets: str | None, target: str) -> bool:
    """A writer's JSON target list allows ``target`` (NULL: any; anonymous: any)."""
    return targets is None or target in json.loads(targets)


def _stored(row: Any) -> StoredDecision:
    blobs = [bytes(row.config)]
    if row.refuted_config is not None:
        blobs.append(bytes(row.refuted_config))
    n = len(blobs)
    rows = decoded_configs(
        row.collection, blobs, [row.config_dtype] * n, [row.config_shape] * n
    )
    return StoredDecision(
        id=int(row.id),
        decided_at=row.decided_at,
        model=row.model,
        model_version=row.model_version,
        compiler=row.compiler,
        graph_id=row.graph_id,
        hlo_fingerprint=row.hlo_fingerprint,
        config=rows[0],
        compiler_options=json.loads(row.compiler_options),
        speedup=float(row.speedup),
        speedup_low=float(row.speedup_low),
        speedup_high=None if row.speedup_high is None else float(row.speedup_high),
        p_value=None if row.p_value is None else float(row.p_value),
        pairs=int(row.pairs),
        budget=int(row.budget),
        strategy=row.strategy,
        kept_default=bool(row.kept_default),
        writer=row.writer,
        refuted_config=rows[1] if len(rows) > 1 else None,
        refuted_reason=row.refuted_reason,
    )
