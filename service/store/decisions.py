"""Tuning decisions: what a tuner kept for a program, and who decided it.

    DecisionTable.add(decision) -> DecisionAdded      idempotent with a key, as feedback
    DecisionTable.for_graph(collection, target, gid) -> [StoredDecision]
    DecisionTable.graph_of(collection, target, hlo_fingerprint) -> gid | None
    DecisionTable.counts() -> {(model, collection, target): decisions}

A decision's config row is stored as a measurement's config is (``codec``: raw
little-endian bytes with dtype and shape), its compiler options as a JSON object.
``for_graph`` answers only decisions that may be served: anonymous ones (stored with
feedback auth off) and those of writers that are not revoked and may (still) write
the target; a revoked writer's rows stay, as its measurements do, until a purge
deletes both (``WriterTable.purge``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import Connection, Table, and_, func, or_, select, update
from sqlalchemy.sql.dml import Insert

from xla_costmodel.service.store import codec
from xla_costmodel.service.store.errors import StoreError
from xla_costmodel.service.store.keys import replayed
from xla_costmodel.service.store.records import MAX_LENGTHS
from xla_costmodel.service.store.schema import decisions, feedback_keys, writers
from xla_costmodel.service.store.writers import Transaction, scoped_key

OptionValue = str | int | float | bool
MAX_STRATEGY = 16


@dataclass(frozen=True)
class DecisionRecord:
    """One decision to store. With an ``idempotency_key``, a resend with the same
    ``request_hash`` stores nothing and gets the first ``response`` back (the
    store sets its ``decision_id``)."""

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


@dataclass(frozen=True)
class DecisionAdded:
    decision_id: int
    duplicate: bool  # the key was seen before with the same hash; nothing stored
    response: dict[str, Any] | None  # the first answer, for a duplicate


@dataclass(frozen=True)
class StoredDecision:
    id: int
    decided_at: datetime
    model: str
    model_version: str
    compiler: str | None
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


InsertIgnore = Callable[[Table, str], Insert]


class DecisionTable:
    """The ``decisions`` table, through the store's transactions."""

    def __init__(self, transaction: Transaction, insert_ignore: InsertIgnore) -> None:
        self._transaction = transaction
        self._insert_ignore = insert_ignore

    def add(self, decision: DecisionRecord) -> DecisionAdded:
        """Store one decision in one transaction (``IdempotencyKeyReused``: its key
        came before with another request hash)."""
        decision.validate()
        row = _row(decision)
        key = decision.idempotency_key
        if key is not None:  # one writer's key never replays another's
            key = scoped_key(key, decision.writer)
        with self._transaction("storing a decision", write=True) as conn:
            if key is not None:
                seen = self._claim(conn, key, decision.request_hash)
                if seen is not None:
                    return seen
            inserted = conn.execute(decisions.insert().returning(decisions.c.id), row)
            decision_id = int(inserted.scalar_one())
            if key is not None:
                response = {**(decision.response or {}), "decision_id": decision_id}
                conn.execute(
                    update(feedback_keys)
                    .where(feedback_keys.c.key == key)
                    .values(response=json.dumps(response))
                )
        return DecisionAdded(decision_id, False, None)

    def for_graph(
        self, collection: str, target: str, graph_id: str
    ) -> list[StoredDecision]:
        """The servable decisions of one graph on one target, oldest first."""
        d, w = decisions.c, writers.c
        active = and_(w.name.is_not(None), w.revoked.is_(None))
        query = (
            select(decisions, w.targets.label("writer_targets"))
            .select_from(decisions.outerjoin(writers, d.writer == w.name))
            .where(d.collection == collection, d.target == target)
            .where(d.graph_id == graph_id, or_(d.writer.is_(None), active))
            .order_by(d.id)
        )
        with self._transaction("reading decisions") as conn:
            rows = conn.execute(query).all()
        return [_stored(r) for r in rows if _may_write(r.writer_targets, target)]

    def graph_of(self, collection: str, target: str, fingerprint: str) -> str | None:
        """The graph id of the newest decision on ``target`` whose program has HLO
        ``fingerprint`` (None: none); ``for_graph`` then answers its decisions."""
        d = decisions.c
        query = (
            select(d.graph_id)
            .where(d.collection == collection, d.target == target)
            .where(d.hlo_fingerprint == fingerprint)
            .order_by(d.id.desc())
            .limit(1)
        )
        with self._transaction("reading decisions") as conn:
            found = conn.execute(query).scalar()
        return None if found is None else str(found)

    def counts(self) -> dict[tuple[str, str, str], int]:
        """Decisions stored per (model, collection, target); one aggregate query."""
        d = decisions.c
        query = select(d.model, d.collection, d.target, func.count()).group_by(
            d.model, d.collection, d.target
        )
        with self._transaction("counting decisions") as conn:
            return {(m, c, t): int(n) for m, c, t, n in conn.execute(query)}

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
        return DecisionAdded(int(response.get("decision_id", 0)), True, response)


def _row(decision: DecisionRecord) -> dict[str, Any]:
    blobs, dtype, shape = codec.encode_configs(np.asarray(decision.config)[None])
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
    }


def _may_write(targets: str | None, target: str) -> bool:
    """A writer's JSON target list allows ``target`` (NULL: any; anonymous: any)."""
    return targets is None or target in json.loads(targets)


def _stored(row: Any) -> StoredDecision:
    config = codec.decode_configs(
        [bytes(row.config)], [row.config_dtype], [row.config_shape]
    )[0]
    return StoredDecision(
        id=int(row.id),
        decided_at=row.decided_at,
        model=row.model,
        model_version=row.model_version,
        compiler=row.compiler,
        config=config,
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
    )
