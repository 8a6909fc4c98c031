"""Measured runtimes fed back by autotuners: checked, scored, stored in the database.

    FeedbackRecorder.record(req) -> FeedbackResult
                                   validate, score with the model, store, count quality
    measure(scores, runtimes)      Kendall tau-b and top-1 slowdown (``xla_costmodel.tpugraphs.metrics``)
    OnlineQuality                  running means per (model, version) since start

The recorder composes two roles: ``FeedbackScorer`` (``core/feedback_scorer.py``:
what the tuner measured, scored as ranking would) and ``FeedbackStore``
(``core/feedback_store.py``: where the measurements are written).

Feedback is the one request that writes the database of record: it archives the
graph it measured (held since its rank or upload) in the transaction that stores
its rows, on the database slots reserved for writers. A writer over its quota hears
so before its configs are scored (a cheap count; the transaction counts again).

A request is acknowledged only once its transaction is committed (``xla_costmodel.service.store``:
durable on SQLite and PostgreSQL). Anything that keeps it from the database is
``FeedbackUnavailable`` (503, nothing stored), so the client may resend it; with an
``Idempotency-Key`` a resend of a stored request is stored once and answered as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

import anyio
import numpy as np
import numpy.typing as npt

from xla_costmodel.runner import ArtifactRunner
from xla_costmodel.service.core.errors import Forbidden, InvalidRequest
from xla_costmodel.service.core.feedback_scorer import FeedbackScorer
from xla_costmodel.service.core.feedback_store import FeedbackStore
from xla_costmodel.service.core.hlo import HloText
from xla_costmodel.service.core.inputs import RawGraph
from xla_costmodel.service.core.registry import ModelRegistry
from xla_costmodel.service.store import MeasurementBatch, Writer
from xla_costmodel.tpugraphs.metrics import kendall_tau, topk_slowdown


class FeedbackEvents(Protocol):
    """What feedback reports: the recorder what it stored, its ``FeedbackStore``
    what failed (``xla_costmodel.service.metrics.tuning.FeedbackMetrics`` implements it)."""

    def feedback_stored(
        self, model: str, version: str, measurements: int, quality: Quality
    ) -> None: ...
    def store_error(self, op: str) -> None: ...


@dataclass(frozen=True, kw_only=True)
class FeedbackRequest:
    """One feedback request, built by keyword once (the route) with who sent it and
    its idempotency key. Exactly one of ``graph_id`` and ``graph`` (the decoder
    checks: ``one_graph``); exactly one of ``configs`` and ``config_indices``, the
    indices with their ``ranking_id`` (the recorder checks: ``_check_choice``)."""

    model: str
    runtimes_ns: Sequence[int]
    model_version: str | None = None  # default: the version serving now
    graph_id: str | None = None
    graph: RawGraph | HloText | None = None  # inline, for a graph not seen before
    configs: Any | None = None  # an array of config rows
    config_indices: Sequence[int] | None = None  # or indices into a rank answer
    ranking_id: str | None = None  # the rank answer config_indices point into
    target: str | None = None  # default: the model's
    compiler: str | None = None  # the build measured under (None: unknown)
    request_id: str | None = None
    idempotency_key: str | None = None
    request_hash: str | None = None  # of the request as sent, compared on a resend
    writer: Writer | None = None  # authenticated (None: feedback auth off)


def _check_choice(req: FeedbackRequest) -> None:
    """Exactly one of ``configs`` and ``config_indices``; ``ranking_id`` with the
    indices (what they index), and only with them."""
    if (req.configs is None) == (req.config_indices is None):
        raise InvalidRequest("give exactly one of configs or config_indices", "configs")
    if (req.ranking_id is not None) and req.config_indices is None:
        raise InvalidRequest("ranking_id goes with config_indices", "ranking_id")
    if req.config_indices is not None and req.ranking_id is None:
        raise InvalidRequest(
            "config_indices need the ranking_id of the rank answer they index",
            "ranking_id",
        )


def _check_writer(writer: Writer | None, target: str) -> None:
    """An authenticated writer writes only for its targets."""
    if writer is not None and not writer.may_write(target):
        raise Forbidden(
            f"writer {writer.name!r} may not write measurements for target "
            f"{target!r} (it may write {', '.join(writer.targets or ())})",
            "target",
        )


@dataclass(frozen=True)
class Quality:
    """Kendall tau-b and top-1 slowdown; None where undefined."""

    kendall_tau: float | None = None
    top1_slowdown: float | None = None


@dataclass(frozen=True, kw_only=True)
class FeedbackResult:
    """The answer, field for field (``FeedbackOut``), and whether it is a resend's."""

    stored: int
    model: str
    model_version: str
    graph_id: str
    target: str
    kendall_tau: float | None  # this request's quality (``measure``)
    top1_slowdown: float | None
    replayed: bool = False  # a resend: the first answer, nothing stored again

    def to_json(self) -> dict[str, Any]:
        """The answer as stored with the idempotency key."""
        body = asdict(self)
        body.pop("replayed")
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> FeedbackResult:
        """The stored answer, replayed."""
        names = [f.name for f in fields(cls) if f.name != "replayed"]
        return cls(**{k: body[k] for k in names}, replayed=True)


def compact(configs: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The smallest integer dtype that holds every value exactly (config features are
    small integers: a 62-node layout config is 1,116 bytes as int8, not 4,464), else
    the configs as they are (float32)."""
    if configs.size == 0 or not np.isfinite(configs).all():
        return configs
    if not np.array_equal(configs, np.round(configs)):
        return configs
    low, high = configs.min(), configs.max()
    for dtype in (np.int8, np.int16, np.int32):
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return configs.astype(dtype)
    return configs


def measure(scores: npt.ArrayLike, runtimes: npt.ArrayLike) -> Quality:
    """Both metrics as ``xla_costmodel.tpugraphs.metrics`` defines them, with K = 1 for the slowdown.

    None for both with fewer than two distinct runtimes: there is nothing to rank.
    """
    if np.unique(np.asarray(runtimes)).size < 2:
        return Quality()
    tau = kendall_tau(scores, runtimes)
    return Quality(None if np.isnan(tau) else tau, topk_slowdown(scores, runtimes, 1))


class OnlineQuality:
    """Running means of each metric per (model, version), over requests where defined."""

    def __init__(self) -> None:
        self._sums: dict[tuple[str, str, str], tuple[float, int]] = {}

    def add(self, model: str, version: str, quality: Quality) -> Quality:
        """Count one request's values; returns the running means after it."""
        means: dict[str, float | None] = {}
        for name, value in vars(quality).items():
            key = (model, version, name)
            total, n = self._sums.get(key, (0.0, 0))
            if value is not None:
                total, n = total + value, n + 1
                self._sums[key] = (total, n)
            means[name] = total / n if n else None
        return Quality(**means)


class FeedbackRecorder:
    """Checks a feedback request, scores its configs, stores it, then counts it.

    ``scorer`` checks what the tuner measured and scores it as ranking does;
    ``store`` writes it to the database of record; ``events`` count what is stored."""

    def __init__(
        self,
        registry: ModelRegistry,
        scorer: FeedbackScorer,
        store: FeedbackStore,
        events: FeedbackEvents,
    ) -> None:
        self.registry = registry
        self.scorer = scorer
        self.store = store
        self.events = events
        self.online = OnlineQuality()

    async def record(self, req: FeedbackRequest) -> FeedbackResult:
        """Check, score with the model, store in one transaction (once per
        idempotency key), count the scores' quality; the answer owed."""
        runner = self.registry.get(req.model, req.model_version)
        _check_choice(req)
        target = req.target or runner.manifest.target
        _check_writer(req.writer, target)
        runtimes = self.scorer.runtimes(req.runtimes_ns)
        await self.store.precheck(req.writer, len(runtimes))
        gid, configs, scores = await self._scored(runner, req)
        if len(configs) != len(runtimes):
            raise InvalidRequest(
                f"{len(configs)} configs but {len(runtimes)} runtimes", "runtimes_ns"
            )
        quality = measure(scores, runtimes)
        result = FeedbackResult(
            stored=len(runtimes),
            model=runner.name,
            model_version=runner.version,
            graph_id=gid,
            target=target,
            kendall_tau=quality.kendall_tau,
            top1_slowdown=quality.top1_slowdown,
        )
        batch = _batch(
            req,
            result,
            collection=runner.collection,
            configs=configs,
            runtimes_ns=runtimes,
            scores=scores,
        )
        batch = await self.store.prepared(batch)  # the quota, the graph to archive
        with anyio.CancelScope(shield=True):  # once committed, always counted
            added = await self.store.add(batch)
            if added.duplicate:
                assert added.response is not None
                return FeedbackResult.from_json(added.response)
            running = self.online.add(runner.name, runner.version, quality)
            self.events.feedback_stored(
                runner.name, runner.version, len(runtimes), running
            )
        return result

    async def _scored(
        self, runner: ArtifactRunner, req: FeedbackRequest
    ) -> tuple[str, np.ndarray[Any, Any], npt.NDArray[np.float32]]:
        """The graph id, and the configs with the model's scores of them."""
        gid = await self.scorer.graph_id(runner, req.graph, req.graph_id)
        if req.configs is not None:
            configs, scores = await self.scorer.score(runner, gid, req.configs)
        else:
            configs, scores = await self.scorer.pick(
                runner, gid, req.config_indices or [], str(req.ranking_id)
            )
        return gid, configs, scores


def _batch(
    req: FeedbackRequest,
    answer: FeedbackResult,
    *,
    collection: str,
    configs: np.ndarray[Any, Any],
    runtimes_ns: npt.NDArray[np.int64],
    scores: npt.NDArray[np.float32],
) -> MeasurementBatch:
    """What the store writes for ``req``: the answer's model, graph and target, the
    checked configs and runtimes with the model's scores, the request's origin (id,
    idempotency key, writer, compiler), and the answer, replayed to a resend."""
    return MeasurementBatch(
        model=answer.model,
        model_version=answer.model_version,
        collection=collection,
        target=answer.target,
        graph_id=answer.graph_id,
        configs=compact(configs),
        runtimes_ns=runtimes_ns,
        scores=scores,
        request_id=req.request_id,
        source="feedback",
        idempotency_key=req.idempotency_key,
        request_hash=req.request_hash,
        response=answer.to_json(),
        writer=None if req.writer is None else req.writer.name,
        compiler=req.compiler,
    )
