"""What tuners' writes and reads report: feedback (``FeedbackEvents``), decisions
(``DecisionEvents``) and best-config lookups (``BestEvents``).

Target labels come from clients: a process names the first ``TARGET_LABELS``
targets it counts, the rest are counted as ``other`` (bounded series).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from xla_costmodel.service.core.best import LookupResult
from xla_costmodel.service.core.decisions import REUSE
from xla_costmodel.service.core.feedback import Quality
from xla_costmodel.service.metrics.stores import StoreMetrics

TARGET_LABELS = 64
OTHER_TARGET = "other"


class TargetLabels:
    """The bounded set of target labels, shared by the decision and best metrics."""

    def __init__(self, limit: int = TARGET_LABELS) -> None:
        self.limit = limit
        self._targets: set[str] = set()

    def __call__(self, target: str) -> str:
        if target in self._targets or len(self._targets) < self.limit:
            self._targets.add(target)
            return target
        return OTHER_TARGET


class FeedbackMetrics:
    """``xla_costmodel.service.core.feedback.FeedbackEvents``."""

    def __init__(self, r: CollectorRegistry, stores: StoreMetrics) -> None:
        self.stores = stores
        self.measurements = Counter(
            "costmodel_feedback_measurements",
            "Measured runtimes stored (committed) by /v1/feedback.",
            ["model"],
            registry=r,
        )
        self.kendall_tau = Gauge(
            "costmodel_online_kendall_tau",
            "Running mean, since start, of Kendall "
            "tau-b between the model's scores and fed-back runtimes (per request).",
            ["model", "version"],
            registry=r,
            multiprocess_mode="liveall",
        )
        self.top1_slowdown = Gauge(
            "costmodel_online_top1_slowdown",
            "Running mean, since start, of the "
            "measured runtime of the best-scored fed-back config / the best one - 1.",
            ["model", "version"],
            registry=r,
            multiprocess_mode="liveall",
        )

    def feedback_stored(
        self, model: str, version: str, measurements: int, quality: Quality
    ) -> None:
        self.measurements.labels(model).inc(measurements)
        if quality.kendall_tau is not None:
            self.kendall_tau.labels(model, version).set(quality.kendall_tau)
        if quality.top1_slowdown is not None:
            self.top1_slowdown.labels(model, version).set(quality.top1_slowdown)

    def store_error(self, op: str) -> None:
        self.stores.store_error(op)


class DecisionMetrics:
    """``xla_costmodel.service.core.decisions.DecisionEvents``."""

    def __init__(
        self, r: CollectorRegistry, stores: StoreMetrics, targets: TargetLabels
    ) -> None:
        self.stores = stores
        self.targets = targets
        self.decisions = Counter(
            "costmodel_decisions",
            "Tuning decisions stored (committed) by POST /v1/decisions.",
            ["target"],
            registry=r,
        )
        self.reuses = Counter(
            "costmodel_reuses",
            "Decisions stored with strategy reuse: a tuner took GET /v1/best's answer.",
            ["target"],
            registry=r,
        )

    def decision_stored(self, target: str, strategy: str) -> None:
        label = self.targets(target)
        self.decisions.labels(label).inc()
        if strategy == REUSE:
            self.reuses.labels(label).inc()

    def store_error(self, op: str) -> None:
        self.stores.store_error(op)


class BestMetrics:
    """``xla_costmodel.service.core.best.BestEvents``."""

    def __init__(
        self, r: CollectorRegistry, stores: StoreMetrics, targets: TargetLabels
    ) -> None:
        self.stores = stores
        self.targets = targets
        self.lookups = Counter(
            "costmodel_best_lookups",
            "GET /v1/best answers: hit (a decision under the asked compiler, or "
            "none asked), stale (only under another compiler), miss (none: 404).",
            ["target", "result"],
            registry=r,
        )

    def best_lookup(self, target: str, result: LookupResult) -> None:
        self.lookups.labels(self.targets(target), result).inc()

    def store_error(self, op: str) -> None:
        self.stores.store_error(op)
