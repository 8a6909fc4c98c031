"""What learning from measurements reports: per-graph adaptation (``AdaptEvents``),
target knowledge (``KnowledgeEvents``) and the rankings they shaped
(``ShapeEvents``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from xla_costmodel.service.metrics.buckets import BATCH_BUCKETS, LATENCY_BUCKETS
from xla_costmodel.service.metrics.stores import StoreMetrics


class AdaptationMetrics:
    """``xla_costmodel.service.core.adaptation.AdaptEvents``."""

    def __init__(self, r: CollectorRegistry, stores: StoreMetrics) -> None:
        self.stores = stores
        self.fits = Histogram(
            "costmodel_adaptation_fit_duration_seconds",
            "Per-graph adaptation fits "
            "(one per graph whose measurements changed) and their duration.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.measurements = Histogram(
            "costmodel_adaptation_fit_measurements",
            "Distinct measured configs a per-graph fit used.",
            ["model"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )

    def adaptation_fitted(self, model: str, seconds: float, used: int) -> None:
        self.fits.labels(model).observe(seconds)
        self.measurements.labels(model).observe(used)

    def store_error(self, op: str) -> None:
        self.stores.store_error(op)


class KnowledgeMetrics:
    """``xla_costmodel.service.core.knowledge.KnowledgeEvents``."""

    def __init__(self, r: CollectorRegistry, stores: StoreMetrics) -> None:
        self.stores = stores
        self.fits = Histogram(
            "costmodel_knowledge_fit_duration_seconds",
            "Target-knowledge fits (off "
            "the request path: a target whose measurements changed) and their duration.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.programs = Gauge(
            "costmodel_knowledge_programs",
            "Programs in the latest target-knowledge "
            "fit of a model (its own target's and, at reduced trust, other targets').",
            ["model"],
            registry=r,
            multiprocess_mode="max",
        )

    def knowledge_fitted(self, model: str, seconds: float, programs: int) -> None:
        self.fits.labels(model).observe(seconds)
        self.programs.labels(model).set(programs)

    def store_error(self, op: str) -> None:
        self.stores.store_error(op)


class ShapingMetrics:
    """``xla_costmodel.service.core.shaping.ShapeEvents``."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.rankings = Counter(
            "costmodel_rankings",
            "Rank requests answered, adapted to measurements of "
            "the graph or by the model's prior alone.",
            ["model", "adapted"],
            registry=r,
        )

    def ranking_adapted(self, model: str, adapted: bool) -> None:
        self.rankings.labels(model, "true" if adapted else "false").inc()
