"""Tuning decisions from autotuners: checked, stored, and told to every process.

    DecisionRecorder.record(req) -> DecisionResult    validate, authorise, store

A decision is what a tuner kept for one program on one target under one compiler:
a config row of the model's collection (the default row when it kept the default),
the compiler options it stands for, and the measured speedup over the default with
its confidence bounds. It is acknowledged once committed; then ``Generations.wrote``
drops the graph's cached decisions in every process (``decision_cache.py``), so the
next ``GET /v1/best`` anywhere sees it. With an ``Idempotency-Key`` a resend is
stored once and answered as before (``stored: false``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

import anyio
import numpy as np

from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.errors import (
    DecisionsUnavailable,
    Forbidden,
    IdempotencyConflict,
    InvalidRequest,
)
from xla_costmodel.service.core.feedback import compact
from xla_costmodel.service.core.generations import Generations
from xla_costmodel.service.core.inputs import Limits, config_array
from xla_costmodel.service.core.registry import ModelRegistry
from xla_costmodel.service.store import (
    DecisionAdded,
    DecisionRecord,
    IdempotencyKeyReused,
    StoreUnavailable,
    Writer,
)
from xla_costmodel.service.store.decisions import OptionValue
from xla_costmodel.tpugraphs.collections import get

log = logging.getLogger(__name__)
REUSE = "reuse"  # the strategy of a tuner that took GET /v1/best's answer
FLOAT32_MAX = float(np.finfo(np.float32).max)


class DecisionEvents(Protocol):
    """What the recorder reports (``xla_costmodel.service.metrics.tuning.DecisionMetrics``)."""

    def decision_stored(self, target: str, strategy: str) -> None: ...
    def store_error(self, op: str) -> None: ...


@dataclass(frozen=True)
class DecisionRequest:
    model: str
    graph_id: str
    config: Any  # the kept row as decoded from JSON: [width] or [NC, width]
    compiler_options: dict[str, OptionValue]
    speedup: float
    speedup_low: float
    pairs: int
    budget: int
    strategy: str
    kept_default: bool
    model_version: str | None = None  # default: the version serving now
    target: str | None = None  # default: the model's
    compiler: str | None = None  # None: unknown
    speedup_high: float | None = None
    p_value: float | None = None
    hlo_fingerprint: str | None = None  # how ``jit`` finds it (GET /v1/best)
    request_id: str | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None  # of the request as sent, compared on a resend
    writer: Writer | None = None  # authenticated (None: feedback auth off)


@dataclass(frozen=True)
class DecisionResult:
    stored: bool
    decision_id: int
    graph_id: str
    target: str
    compiler: str | None
    model: str
    model_version: str
    replayed: bool = False  # a resend: the first answer, nothing stored again

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        del body["replayed"]
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> DecisionResult:
        fields = ("decision_id", "graph_id", "target", "compiler", "model")
        return cls(
            False,
            **{k: body[k] for k in fields},
            model_version=body["model_version"],
            replayed=True,
        )


class DecisionRecorder:
    def __init__(
        self,
        registry: ModelRegistry,
        db: Database,
        generations: Generations,
        limits: Limits,
        events: DecisionEvents,
    ) -> None:
        self.registry = registry
        self.db = db
        self.generations = generations
        self.limits = limits
        self.events = events

    async def record(self, req: DecisionRequest) -> DecisionResult:
        # The model names the collection (config width) and default target; the
        # version is recorded only: a decision outlives the model that helped find it.
        runner = self.registry.get(req.model)
        target = req.target or runner.manifest.target
        writer = req.writer
        if writer is not None and not writer.may_write(target):
            raise Forbidden(
                f"writer {writer.name!r} may not write decisions for target "
                f"{target!r} (it may write {', '.join(writer.targets or ())})",
                "target",
            )
        config = self._config(runner.collection, req)
        _check_speedups(req)
        version = req.model_version or runner.version
        result = DecisionResult(
            True, 0, req.graph_id, target, req.compiler, runner.name, version
        )
        record = DecisionRecord(
            model=runner.name,
            model_version=version,
            collection=runner.collection,
            target=target,
            compiler=req.compiler,
            graph_id=req.graph_id,
            config=config,
            compiler_options=req.compiler_options,
            speedup=req.speedup,
            speedup_low=req.speedup_low,
            speedup_high=req.speedup_high,
            p_value=req.p_value,
            pairs=req.pairs,
            budget=req.budget,
            strategy=req.strategy,
            kept_default=req.kept_default,
            writer=None if writer is None else writer.name,
            request_id=req.request_id,
            hlo_fingerprint=req.hlo_fingerprint,
            idempotency_key=req.idempotency_key,
            request_hash=req.request_hash,
            response=result.to_json(),
        )
        with anyio.CancelScope(shield=True):  # once committed, always counted
            added = await self._add(record)
            if added.duplicate:
                return DecisionResult.from_json(added.response or {})
            self.events.decision_stored(target, req.strategy)
        return replace(result, decision_id=added.decision_id)

    def _config(self, collection: str, req: DecisionRequest) -> np.ndarray[Any, Any]:
        """The kept row, checked against the collection (and its default row)."""
        spec = get(collection)
        _numbers(req.config)
        arr = config_array(req.config, "config").astype(np.float64)
        want = f"[NC,{spec.width}]" if spec.per_node else f"[{spec.width}]"
        ndim = 2 if spec.per_node else 1
        if arr.ndim != ndim or arr.shape[-1] != spec.width or arr.size == 0:
            raise InvalidRequest(
                f"{collection} configs are one row of shape {want}, got "
                f"{list(arr.shape)}",
                "config",
            )
        if spec.per_node and arr.shape[0] > self.limits.max_nodes:
            raise InvalidRequest(f"more than {self.limits.max_nodes} rows", "config")
        if not np.all(np.abs(arr) <= FLOAT32_MAX):
            raise InvalidRequest("values must be finite float32 numbers", "config")
        if req.kept_default:
            _check_default(spec.default_config, arr, req.compiler_options)
        row: np.ndarray[Any, Any] = compact(arr[None])[0]
        return row

    async def _add(self, record: DecisionRecord) -> DecisionAdded:
        try:
            added = await self.db.run(lambda s: s.decisions.add(record), writers=True)
        except IdempotencyKeyReused as exc:
            raise IdempotencyConflict(str(exc), "Idempotency-Key") from None
        except StoreUnavailable as exc:
            # The client hears what happened, not the driver's message.
            self.events.store_error("add_decision")
            log.warning("decision not stored", extra={"error": str(exc)})
            raise DecisionsUnavailable(
                "decision not stored: the measurement database is unavailable; "
                "retry later"
            ) from None
        if not added.duplicate:  # every process's cached decisions of the graph go
            await self.generations.wrote(
                record.collection, record.target, record.graph_id
            )
        return added


def _numbers(value: Any) -> None:
    """Numbers, or lists of numbers: JSON true/false are not config values."""
    rows = value if value and isinstance(value[0], list) else [value]
    for row in rows:
        if not isinstance(row, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in row
        ):
            raise InvalidRequest("expected numbers (a row, or rows of one)", "config")


def _check_speedups(req: DecisionRequest) -> None:
    if req.speedup_low > req.speedup:
        raise InvalidRequest("speedup_low must be <= speedup", "speedup_low")
    if req.speedup_high is not None and req.speedup_high < req.speedup:
        raise InvalidRequest("speedup_high must be >= speedup", "speedup_high")
    values = (req.speedup, req.speedup_low, req.speedup_high or 1.0)
    if not all(math.isfinite(v) for v in values):
        raise InvalidRequest("speedups must be finite", "speedup")


def _check_default(
    default: tuple[float, ...] | None,
    row: np.ndarray[Any, Any],
    options: dict[str, OptionValue],
) -> None:
    """A kept default is the compiler's own config: no options, and the
    collection's default row where it has one."""
    if options:
        raise InvalidRequest(
            "kept_default: the default takes no compiler options (send {})",
            "compiler_options",
        )
    if default is not None and not np.array_equal(row, np.asarray(default)):
        raise InvalidRequest(
            "kept_default: config must be the collection's default row", "config"
        )
