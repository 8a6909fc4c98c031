"""Tuning decisions from autotuners: checked, measured, stored, told to every process.

    DecisionRecorder.record(req) -> DecisionResult    validate, authorise, store

A decision is what a tuner kept for one program on one target under one compiler:
one row of the model's collection (the default row when it kept the default). The
service derives everything else (docs/reuse.md, "What the fleet applies"):

- the compiler options, from the row (``decision_rows.options_of``); a request that
  sends others is refused (422 ``compiler_options``), an invalid row too (``config``);
- the speedup, its interval and p-value, from the writer's ``paired_runtimes_ns``
  (the default and the row timed together in each pair), required for any row but
  the default (422 ``decision_unmeasured``), and stored as the writer's
  measurements of the graph in the decision's transaction (the graph must be
  stored: else ``decision_unmeasured`` naming ``graph_id``). A kept default brings
  no pairs, but its writer must have measured the graph on the target, unless it
  reports that the fleet's answer computed other outputs (``refuted``: "outputs").
  Claimed figures in a request (``speedup``, ...) are never stored.

A decision and its rows count against the writer's quota (429); it replaces the
writer's older decision of the same program and compiler. It is acknowledged once
committed; then every process hears ``DecisionsWritten`` (``events.py``), which
drops the graph's cached decisions and the target's fingerprint answers
(``decision_cache.py``), and, when it brought pairs, ``MeasurementsWritten``: a kept
default or a refutation without pairs changes no measurement, so it drops no
measurement generation and wakes no refit. With an ``Idempotency-Key`` a resend is
stored once and answered as before (``stored: false``).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, Protocol

import anyio
import numpy as np

from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.decision_rows import (
    Options,
    Pairs,
    checked_row,
    decided_figures,
    options_of,
    paired_measurements,
    refutation,
)
from xla_costmodel.service.core.errors import (
    DecisionsUnavailable,
    DecisionUnmeasured,
    Forbidden,
    IdempotencyConflict,
    InvalidRequest,
    QuotaExceeded,
)
from xla_costmodel.service.core.event_bus import EventBus
from xla_costmodel.service.core.events import (
    DecisionsWritten,
    Event,
    MeasurementsWritten,
)
from xla_costmodel.service.core.inputs import Limits
from xla_costmodel.service.core.registry import ModelRegistry
from xla_costmodel.service.store import (
    DecisionAdded,
    DecisionRecord,
    IdempotencyKeyReused,
    MeasurementBatch,
    Quota,
    StoreUnavailable,
    UnknownGraph,
    Writer,
    WriterQuotaExceeded,
)
from xla_costmodel.service.store.decisions import Unmeasured
from xla_costmodel.tpugraphs.collections import CollectionSpec, get
from xla_costmodel.tpugraphs.paired import PairedSummary

log = logging.getLogger(__name__)
REUSE = "reuse"  # the strategy of a tuner that took GET /v1/best's answer
Reason = Literal["slower", "outputs"]


class DecisionEvents(Protocol):
    """What the recorder reports (``xla_costmodel.service.metrics.tuning.DecisionMetrics``)."""

    def decision_stored(self, target: str, strategy: str) -> None: ...
    def store_error(self, op: str) -> None: ...


@dataclass(frozen=True, kw_only=True)
class Refutation:
    """The fleet's answer this writer compiled and found wrong (docs/reuse.md)."""

    config: Any  # the row as decoded from JSON
    reason: Reason
    paired_runtimes_ns: Pairs | None = None  # "slower": required


@dataclass(frozen=True, kw_only=True)
class DecisionRequest:
    model: str
    graph_id: str
    config: Any  # the kept row as decoded from JSON: [width] or [NC, width]
    budget: int
    strategy: str
    kept_default: bool
    paired_runtimes_ns: Pairs | None = None  # required unless kept_default
    compiler_options: Options | None = None  # if sent: must be the row's
    refuted: Refutation | None = None
    model_version: str | None = None  # default: the version serving now
    target: str | None = None  # default: the model's
    compiler: str | None = None  # None: unknown
    hlo_fingerprint: str | None = None  # how ``jit`` finds it (GET /v1/best)
    request_id: str | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None  # of the request as sent, compared on a resend
    writer: Writer | None = None  # authenticated (None: feedback auth off)


@dataclass(frozen=True, kw_only=True)
class DecisionResult:
    stored: bool
    decision_id: int
    graph_id: str
    target: str
    compiler: str | None
    model: str
    model_version: str
    compiler_options: Options
    speedup: float
    speedup_low: float
    speedup_high: float | None
    p_value: float | None
    pairs: int
    replaced: bool = False  # the writer's older decision of the program went
    replayed: bool = False  # a resend: the first answer, nothing stored again

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        del body["replayed"]
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> DecisionResult:
        # Answers stored before revision 0004 lack the figures: a kept default's.
        figures = {"compiler_options": {}, "speedup": 1.0, "speedup_low": 1.0}
        figures |= {"speedup_high": None, "p_value": None, "pairs": 0}
        return cls(**{**figures, **body, "stored": False}, replayed=True)


@dataclass(frozen=True, kw_only=True)
class Checked:
    """A decision request checked against its collection (``decision_rows.py``)."""

    spec: CollectionSpec
    row: np.ndarray[Any, Any]  # the kept row, compacted
    options: Options  # derived from the row
    figures: PairedSummary  # the server's, from the pairs (a kept default's own)
    refuted: tuple[np.ndarray[Any, Any], str] | None  # row (row's dtype), reason


class DecisionRecorder:
    def __init__(
        self,
        registry: ModelRegistry,
        db: Database,
        bus: EventBus,
        limits: Limits,
        events: DecisionEvents,
        quota: Quota | None = None,
    ) -> None:
        self.registry = registry
        self.db = db
        self.bus = bus
        self.limits = limits
        self.events = events
        self.quota = quota  # per writer, as feedback's (anonymous: none)

    async def record(self, req: DecisionRequest) -> DecisionResult:
        """Check ``req`` against the model's collection, store it with its pairs
        in one transaction, and answer (a resend: the first answer)."""
        # The model names the collection (config width) and default target; the
        # version is recorded only: a decision outlives the model that helped find it.
        runner = self.registry.get(req.model)
        target = _authorised(req.writer, req.target or runner.manifest.target)
        checked = self._checked(req, get(runner.collection))
        answer = _answer(req, checked, target, runner.name, runner.version)
        record = self._record(req, checked, answer, runner.collection)
        return await self._commit(record, answer, req.strategy)

    def _checked(self, req: DecisionRequest, spec: CollectionSpec) -> Checked:
        """The request's rows, options and figures, as the collection has them."""
        row = self._row(spec, req.config, "config")
        options = options_of(spec, row, "config")
        if req.compiler_options is not None and req.compiler_options != options:
            raise InvalidRequest(
                "compiler_options are derived from the config row; these differ "
                f"from the row's {options} (send none)",
                "compiler_options",
            )
        figures = decided_figures(spec, row, req.kept_default, req.paired_runtimes_ns)
        refuted = None
        if req.refuted is not None:
            other = self._row(spec, req.refuted.config, "refuted.config")
            refuted = refutation(spec, row, other, req.refuted)
        return Checked(
            spec=spec, row=row, options=options, figures=figures, refuted=refuted
        )

    def _record(
        self,
        req: DecisionRequest,
        checked: Checked,
        answer: DecisionResult,
        collection: str,
    ) -> DecisionRecord:
        """The row to store: the answer's figures, the request's provenance."""
        writer = None if req.writer is None else req.writer.name
        return DecisionRecord(
            model=answer.model,
            model_version=answer.model_version,
            collection=collection,
            target=answer.target,
            compiler=req.compiler,
            graph_id=req.graph_id,
            config=checked.row,
            compiler_options=answer.compiler_options,
            speedup=answer.speedup,
            speedup_low=answer.speedup_low,
            speedup_high=answer.speedup_high,
            p_value=answer.p_value,
            pairs=answer.pairs,
            budget=req.budget,
            strategy=req.strategy,
            kept_default=req.kept_default,
            writer=writer,
            request_id=req.request_id,
            hlo_fingerprint=req.hlo_fingerprint,
            idempotency_key=req.idempotency_key,
            request_hash=req.request_hash,
            response=answer.to_json(),
            refuted_config=None if checked.refuted is None else checked.refuted[0],
            refuted_reason=None if checked.refuted is None else checked.refuted[1],
            measurements=_measurements(req, checked, answer, collection),
            # A refutation's own pairs measure the graph; an outputs report needs
            # none (jit's verification found the fleet's answer wrong).
            measured_before=req.kept_default and checked.refuted is None,
            quota=None if writer is None else self.quota,
        )

    async def _commit(
        self, record: DecisionRecord, answer: DecisionResult, strategy: str
    ) -> DecisionResult:
        """Store ``record``; the answer with its id, or a resend's first answer."""
        with anyio.CancelScope(shield=True):  # once committed, always counted
            added = await self._add(record)
            if added.duplicate:
                return DecisionResult.from_json(added.response or {})
            self.events.decision_stored(record.target, strategy)
        return replace(answer, decision_id=added.decision_id, replaced=added.replaced)

    def _row(
        self, spec: CollectionSpec, value: Any, field: str
    ) -> np.ndarray[Any, Any]:
        return checked_row(spec, value, field, self.limits.max_nodes)

    async def _add(self, record: DecisionRecord) -> DecisionAdded:
        try:
            added = await self.db.run(lambda s: s.decisions.add(record), writers=True)
        except IdempotencyKeyReused as exc:
            raise IdempotencyConflict(str(exc), "Idempotency-Key") from None
        except UnknownGraph:
            raise DecisionUnmeasured(
                f"graph {record.graph_id} is not in the measurement database: a "
                "decision's pairs are the writer's measurements of a stored graph "
                "(send it with feedback first)",
                "graph_id",
            ) from None
        except Unmeasured:
            raise DecisionUnmeasured(
                f"kept default of graph {record.graph_id}: this writer stored no "
                f"measurements of it on target {record.target!r}",
                "graph_id",
            ) from None
        except WriterQuotaExceeded as exc:
            raise QuotaExceeded(str(exc), exc.retry_after_s) from None
        except StoreUnavailable as exc:
            # The client hears what happened, not the driver's message.
            self.events.store_error("add_decision")
            log.warning("decision not stored", extra={"error": str(exc)})
            raise DecisionsUnavailable(
                "decision not stored: the measurement database is unavailable; "
                "retry later"
            ) from None
        if not added.duplicate:  # every process's caches hear what it changed
            await self.bus.publish(*_written(record))
        return added


def _authorised(writer: Writer | None, target: str) -> str:
    """``target``, if ``writer`` may write it (anonymous writers may write any)."""
    if writer is not None and not writer.may_write(target):
        raise Forbidden(
            f"writer {writer.name!r} may not write decisions for target "
            f"{target!r} (it may write {', '.join(writer.targets or ())})",
            "target",
        )
    return target


def _answer(
    req: DecisionRequest, checked: Checked, target: str, model: str, version: str
) -> DecisionResult:
    """The answer before storing (no id yet); a kept default has no interval's
    upper bound nor p-value."""
    figures = checked.figures
    measured = not req.kept_default
    return DecisionResult(
        stored=True,
        decision_id=0,
        graph_id=req.graph_id,
        target=target,
        compiler=req.compiler,
        model=model,
        model_version=req.model_version or version,
        compiler_options=checked.options,
        speedup=figures.speedup,
        speedup_low=figures.speedup_low,
        speedup_high=figures.speedup_high if measured else None,
        p_value=figures.p_value if measured else None,
        pairs=figures.pairs,
    )


def _written(record: DecisionRecord) -> tuple[Event, ...]:
    """What storing ``record`` changed: its decisions, and its graph's measurements
    when it brought pairs (stored in the same transaction)."""
    where = (record.collection, record.target, record.graph_id)
    if record.measurements is None:
        return (DecisionsWritten(*where),)
    return MeasurementsWritten(*where), DecisionsWritten(*where)


def _measurements(
    req: DecisionRequest, checked: Checked, answer: DecisionResult, collection: str
) -> MeasurementBatch | None:
    """The pairs (the decision's and its refutation's) as the writer's
    measurements of the graph; None when it brings none."""
    refuted = req.refuted
    configs, runtimes = paired_measurements(
        checked.spec.default_config,
        checked.row,
        None if req.kept_default else req.paired_runtimes_ns,
        None if checked.refuted is None else checked.refuted[0],
        None if refuted is None else refuted.paired_runtimes_ns,
    )
    if not len(runtimes):
        return None
    return MeasurementBatch(
        model=answer.model,
        model_version=answer.model_version,
        collection=collection,
        target=answer.target,
        graph_id=req.graph_id,
        configs=configs,
        runtimes_ns=runtimes,
        scores=None,
        request_id=req.request_id,
        source="feedback",
        writer=None if req.writer is None else req.writer.name,
        compiler=req.compiler,
    )
