"""Prometheus metrics, one ``CollectorRegistry`` per app (tests build several apps).

One collector per concern, each implementing the event protocol of the core
component it measures, so the core never imports prometheus_client:

    requests.RequestMetrics     the middleware: latency, statuses, in flight
    process.ProcessMetrics      readiness, memory, the in-process cache's size
    stores.StoreMetrics         store_error of every protocol, statements, seals
    stores.GenerationMetrics    core.generations.GenerationEvents
    cache.CacheMetrics          core.tiered.CacheEvents (and the graph archive's)
    models.RegistryMetrics      core.registry.RegistryEvents
    models.StageMetrics         core.inference.StageEvents
    learning.*Metrics           core.adaptation, core.knowledge, core.shaping
    tuning.*Metrics             core.feedback, core.decisions, core.best

``Metrics`` composes them on one registry and renders it; the app's core factory
(``core/build.py``) hands each component its own collector.

Several workers (``costmodel serve --workers N``): with ``PROMETHEUS_MULTIPROC_DIR``
set before prometheus_client is imported, every value lives in a per-process file in
that directory and ``render`` merges all of them (``MultiProcessCollector``): counters
and histograms are summed over workers, dead ones included; each gauge declares how
its workers' values combine (``multiprocess_mode``, ignored in one process). The
fleet figures (``fleet_metrics.py``) are a snapshot of the shared database, rendered
by whichever worker answers, never merged.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from prometheus_client import CollectorRegistry, generate_latest, multiprocess

from xla_costmodel.service.core.fleet import FleetSnapshot
from xla_costmodel.service.fleet_metrics import FleetCollector
from xla_costmodel.service.metrics.cache import CacheMetrics
from xla_costmodel.service.metrics.learning import (
    AdaptationMetrics,
    KnowledgeMetrics,
    ShapingMetrics,
)
from xla_costmodel.service.metrics.models import RegistryMetrics, StageMetrics
from xla_costmodel.service.metrics.process import ProcessMetrics
from xla_costmodel.service.metrics.requests import RequestMetrics
from xla_costmodel.service.metrics.stores import GenerationMetrics, StoreMetrics
from xla_costmodel.service.metrics.tuning import (
    BestMetrics,
    DecisionMetrics,
    FeedbackMetrics,
    TargetLabels,
)
from xla_costmodel.service.metrics.workers import (
    forget_dead_workers,
    mark_dead,
    multiprocess_dir,
)

__all__ = ["Metrics", "multiprocess_dir"]


class Metrics:
    """Every collector of one app, on one registry."""

    def __init__(self) -> None:
        self.multiprocess = multiprocess_dir() is not None
        self.registry = r = CollectorRegistry()
        self.http = RequestMetrics(r)
        self.process = ProcessMetrics(r, self.multiprocess)
        self.stores = StoreMetrics(r)
        self.generations = GenerationMetrics(r, self.stores)
        self.cache = CacheMetrics(r, self.stores, on_lookup=self.process.sample)
        self.models = RegistryMetrics(r)
        self.stages = StageMetrics(r)
        self.adaptation = AdaptationMetrics(r, self.stores)
        self.knowledge = KnowledgeMetrics(r, self.stores)
        self.shaping = ShapingMetrics(r)
        self.feedback = FeedbackMetrics(r, self.stores)
        targets = TargetLabels()
        self.decisions = DecisionMetrics(r, self.stores, targets)
        self.best = BestMetrics(r, self.stores, targets)
        self._fleet: FleetCollector | None = None

    def render(self) -> bytes:
        if not self.multiprocess:
            return generate_latest(self.registry)
        self.process.sample(force=True)
        forget_dead_workers(multiprocess_dir() or "")
        merged = CollectorRegistry()  # every worker's files, not only this one's
        # prometheus_client's multiprocess module is unannotated.
        multiprocess.MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
        if self._fleet is not None:  # a snapshot of the database: never summed
            merged.register(self._fleet)
        return generate_latest(merged)

    def close(self) -> None:
        """On a worker's exit: its live* gauges leave the merged view."""
        if self.multiprocess:
            mark_dead(os.getpid())

    def watch_memory(
        self, nbytes: Callable[[], float], entries: Callable[[], float]
    ) -> None:
        """Expose the in-process cache's size: ``nbytes()`` and ``entries()``."""
        self.process.watch_memory(nbytes, entries)

    def watch_ready(self, ready: Callable[[], bool]) -> None:
        """Expose ``ready()`` (what /readyz answers) as ``costmodel_ready``."""
        self.process.watch_ready(ready)

    def watch_fleet(self, snapshot: Callable[[], FleetSnapshot], targets: int) -> None:
        """Expose the fleet figures of ``snapshot()``, at most ``targets`` per model."""
        self._fleet = FleetCollector(snapshot, targets)
        if not self.multiprocess:
            self.registry.register(self._fleet)
