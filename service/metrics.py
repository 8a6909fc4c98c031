"""Prometheus metrics, one ``CollectorRegistry`` per app (tests build several apps).

Implements the event protocols of the core (cache, registry, ranker, feedback) so the
core never imports prometheus_client.

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
import time
from collections.abc import Callable, Sequence

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from xla_costmodel.runner import ArtifactRunner
from xla_costmodel.service.core.decisions import REUSE
from xla_costmodel.service.core.feedback import Quality
from xla_costmodel.service.core.fleet import FleetSnapshot
from xla_costmodel.service.core.tiered import Level
from xla_costmodel.service.fleet_metrics import FleetCollector
from xla_costmodel.service.process_memory import memory_limit_bytes, resident_bytes

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 50_000)
# Workers sample their RSS on cache events at most this often (a /proc read).
RSS_SAMPLE_S = 1.0
# Target labels of the decision metrics come from clients: a process names the
# first this many targets it counts, the rest are counted as "other" (bounded series).
TARGET_LABELS = 64
OTHER_TARGET = "other"


def multiprocess_dir() -> str | None:
    """The directory of multiprocess mode, or None in one process."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def _forget_dead_workers(path: str) -> None:
    """Drop the live* gauges of workers that died without their lifespan's exit
    (uvicorn kills a hung or crashed worker and starts another, with no hook)."""
    pids = {
        int(name.rsplit("_", 1)[1][: -len(".db")])
        for name in os.listdir(path)
        if name.startswith("gauge_live") and name.endswith(".db")
    }
    for pid in pids:
        try:
            os.kill(pid, 0)  # signal 0: only asks whether the process exists
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
        except PermissionError:  # alive, another user's: not ours to judge
            pass


class Metrics:
    def __init__(self) -> None:
        self.multiprocess = multiprocess_dir() is not None
        self.registry = r = CollectorRegistry()
        self.request_seconds = Histogram(
            "costmodel_request_duration_seconds",
            "Request latency, whole request.",
            ["route", "method", "model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.requests = Counter(
            "costmodel_requests",
            "Responses by route and status.",
            ["route", "method", "status"],
            registry=r,
        )
        self.inflight = Gauge(
            "costmodel_inflight_requests",
            "Requests in progress.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.encode_seconds = Histogram(
            "costmodel_encode_duration_seconds",
            "Encoder run time (one graph).",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.score_seconds = Histogram(
            "costmodel_score_duration_seconds",
            "Scorer run time (one config batch).",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "costmodel_rank_batch_size",
            "Configs per rank request.",
            ["model"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.configs_ranked = Counter(
            "costmodel_configs_ranked", "Configs scored.", ["model"], registry=r
        )
        self.cache_hits = Counter(
            "costmodel_cache_hits", "Embedding cache hits.", ["level"], registry=r
        )
        self.cache_misses = Counter(
            "costmodel_cache_misses", "Embedding cache misses.", ["level"], registry=r
        )
        self.cache_errors = Counter(
            "costmodel_cache_errors",
            "Embedding cache failures (each one a miss).",
            ["level", "op"],
            registry=r,
        )
        self.cache_bypassed = Counter(
            "costmodel_cache_bypassed",
            "Lookups that skipped Redis during its cooldown.",
            ["level"],
            registry=r,
        )
        self.redis_integrity_failures = Counter(
            "costmodel_redis_integrity_failures",
            "Redis values and messages whose seal did not verify (each one a miss, "
            "or a message dropped): someone else than the service wrote them.",
            ["kind"],
            registry=r,
        )
        # Workers: the sum over live ones, each as of its latest cache lookup.
        self.memory_bytes = Gauge(
            "costmodel_cache_memory_bytes",
            "Bytes held by the in-process cache.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.memory_entries = Gauge(
            "costmodel_cache_memory_entries",
            "Entries in the in-process cache.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.model_info = Gauge(
            "costmodel_model_info",
            "Loaded model versions (1 = serves unpinned requests).",
            ["model", "version", "collection"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.reloads = Counter(
            "costmodel_model_reloads",
            "Model loads and reloads by result.",
            ["model", "result"],
            registry=r,
        )
        self.feedback_measurements = Counter(
            "costmodel_feedback_measurements",
            "Measured runtimes stored (committed) by /v1/feedback.",
            ["model"],
            registry=r,
        )
        self.online_kendall_tau = Gauge(
            "costmodel_online_kendall_tau",
            "Running mean, since start, of Kendall "
            "tau-b between the model's scores and fed-back runtimes (per request).",
            ["model", "version"],
            registry=r,
            multiprocess_mode="liveall",
        )
        self.online_top1_slowdown = Gauge(
            "costmodel_online_top1_slowdown",
            "Running mean, since start, of the "
            "measured runtime of the best-scored fed-back config / the best one - 1.",
            ["model", "version"],
            registry=r,
            multiprocess_mode="liveall",
        )
        self.adapt_fits = Histogram(
            "costmodel_adaptation_fit_duration_seconds",
            "Per-graph adaptation fits "
            "(one per graph whose measurements changed) and their duration.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.adapt_measurements = Histogram(
            "costmodel_adaptation_fit_measurements",
            "Distinct measured configs a per-graph fit used.",
            ["model"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.knowledge_fits = Histogram(
            "costmodel_knowledge_fit_duration_seconds",
            "Target-knowledge fits (off "
            "the request path: a target whose measurements changed) and their duration.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.knowledge_programs = Gauge(
            "costmodel_knowledge_programs",
            "Programs in the latest target-knowledge "
            "fit of a model (its own target's and, at reduced trust, other targets').",
            ["model"],
            registry=r,
            multiprocess_mode="max",
        )
        self.rankings = Counter(
            "costmodel_rankings",
            "Rank requests answered, adapted to measurements of "
            "the graph or by the model's prior alone.",
            ["model", "adapted"],
            registry=r,
        )
        self.store_errors = Counter(
            "costmodel_store_errors",
            "Measurement database failures by operation "
            "(feedback: 503; ranking: prior alone; archive: retried on a later sight).",
            ["op"],
            registry=r,
        )
        self.body_timeouts = Counter(
            "costmodel_body_timeouts",
            "Requests answered 408: the body did not "
            "arrive within COSTMODEL_BODY_TIMEOUT_S (before taking an in-flight slot).",
            registry=r,
        )
        self.ready = Gauge(
            "costmodel_ready",
            "1 when every configured model is loaded and warm "
            "(what /readyz answers); the lowest over live workers.",
            registry=r,
            multiprocess_mode="livemin",
        )
        self.resident_bytes = Gauge(
            "costmodel_process_resident_memory_bytes",
            "Resident memory of the service's processes (the sum over live workers).",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.memory_limit = Gauge(
            "costmodel_memory_limit_bytes",
            "Memory the processes may use: the "
            "cgroup's limit (a pod's limits.memory), else the machine's RAM.",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.memory_limit.set(memory_limit_bytes())
        self.generation_lookups = Counter(
            "costmodel_generation_lookups",
            "Measurement generations asked for by outcome "
            "(hit: cached and known fresh; read: a database query).",
            ["outcome"],
            registry=r,
        )
        self.generation_invalidations = Counter(
            "costmodel_generation_invalidations",
            "Cached generations dropped: by this "
            "process's writes, another's (Redis), or all at a (re)subscription.",
            ["source"],
            registry=r,
        )
        self.generation_subscribed = Gauge(
            "costmodel_generation_subscribed",
            "1 while the invalidation subscription "
            "is live (else COSTMODEL_FRESHNESS_S bounds staleness); lowest over workers.",
            registry=r,
            multiprocess_mode="livemin",
        )
        self.generation_errors = Counter(
            "costmodel_generation_errors",
            "Redis failures of generation notification (each only shortens trust).",
            ["op"],
            registry=r,
        )
        self.db_statements = Counter(
            "costmodel_db_statements",
            "Statements sent to the measurement database.",
            registry=r,
        )
        self.decisions = Counter(
            "costmodel_decisions",
            "Tuning decisions stored (committed) by POST /v1/decisions.",
            ["target"],
            registry=r,
        )
        self.best_lookups = Counter(
            "costmodel_best_lookups",
            "GET /v1/best answers: hit (a decision under the asked compiler, or "
            "none asked), stale (only under another compiler), miss (none: 404).",
            ["target", "result"],
            registry=r,
        )
        self.reuses = Counter(
            "costmodel_reuses",
            "Decisions stored with strategy reuse: a tuner took GET /v1/best's answer.",
            ["target"],
            registry=r,
        )
        self._targets: set[str] = set()
        self._loaded: dict[str, list[tuple[str, str, str]]] = {}
        self._memory: tuple[Callable[[], float], Callable[[], float]] | None = None
        self._ready: Callable[[], bool] | None = None
        self._fleet: FleetCollector | None = None
        self._rss_sampled = -RSS_SAMPLE_S
        if not self.multiprocess:
            self.resident_bytes.set_function(resident_bytes)
        else:
            self._sample_gauges(force=True)

    def render(self) -> bytes:
        if not self.multiprocess:
            return generate_latest(self.registry)
        self._sample_gauges(force=True)
        _forget_dead_workers(multiprocess_dir() or "")
        merged = CollectorRegistry()  # every worker's files, not only this one's
        # prometheus_client's multiprocess module is unannotated.
        multiprocess.MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
        if self._fleet is not None:  # a snapshot of the database: never summed
            merged.register(self._fleet)
        return generate_latest(merged)

    def close(self) -> None:
        """On a worker's exit: its live* gauges leave the merged view."""
        if self.multiprocess:
            multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]

    def watch_memory(
        self, nbytes: Callable[[], float], entries: Callable[[], float]
    ) -> None:
        if self.multiprocess:  # set_function is not seen by the other workers
            self._memory = (nbytes, entries)
            return
        self.memory_bytes.set_function(nbytes)
        self.memory_entries.set_function(entries)

    def watch_ready(self, ready: Callable[[], bool]) -> None:
        if not self.multiprocess:
            self.ready.set_function(lambda: 1.0 if ready() else 0.0)
            return
        self._ready = ready  # sampled now, on cache events and when rendering
        self.ready.set(1 if ready() else 0)

    def watch_fleet(self, snapshot: Callable[[], FleetSnapshot], targets: int) -> None:
        """Expose the fleet figures of ``snapshot()``, at most ``targets`` per model."""
        self._fleet = FleetCollector(snapshot, targets)
        if not self.multiprocess:
            self.registry.register(self._fleet)

    def _sample_gauges(self, force: bool = False) -> None:
        if self._memory is not None:
            self.memory_bytes.set(self._memory[0]())
            self.memory_entries.set(self._memory[1]())
        if self._ready is not None:
            self.ready.set(1 if self._ready() else 0)
        now = time.monotonic()
        # Multiprocess: another worker renders, so each one samples its own RSS.
        if self.multiprocess and (force or now - self._rss_sampled >= RSS_SAMPLE_S):
            self._rss_sampled = now
            self.resident_bytes.set(resident_bytes())

    # xla_costmodel.service.core.tiered.CacheEvents
    def cache_hit(self, level: Level) -> None:
        self.cache_hits.labels(level).inc()
        self._sample_gauges()

    def cache_miss(self, level: Level) -> None:
        self.cache_misses.labels(level).inc()
        self._sample_gauges()

    def cache_error(self, level: Level, op: str) -> None:
        self.cache_errors.labels(level, op).inc()

    def cache_bypass(self, level: Level) -> None:
        self.cache_bypassed.labels(level).inc()

    def redis_integrity_failure(self, kind: str) -> None:
        self.redis_integrity_failures.labels(kind).inc()

    # xla_costmodel.service.core.scoring.StageEvents
    def encoded(self, model: str, seconds: float) -> None:
        self.encode_seconds.labels(model).observe(seconds)

    def scored(self, model: str, seconds: float, configs: int) -> None:
        self.score_seconds.labels(model).observe(seconds)
        self.batch_size.labels(model).observe(configs)
        self.configs_ranked.labels(model).inc(configs)

    # xla_costmodel.service.core.registry.RegistryEvents
    def model_versions(self, name: str, loaded: Sequence[ArtifactRunner]) -> None:
        for labels in self._loaded.pop(name, []):
            # A worker's file keeps a removed series' value: 0, not a stale 1.
            self.model_info.labels(*labels).set(0)
            self.model_info.remove(*labels)
        self._loaded[name] = [(name, run.version, run.collection) for run in loaded]
        for i, labels in enumerate(self._loaded[name]):
            self.model_info.labels(*labels).set(1 if i == len(loaded) - 1 else 0)

    def model_reload(self, name: str, result: str) -> None:
        self.reloads.labels(name, result).inc()

    # core.adaptation.AdaptEvents, core.shaping.ShapeEvents, GraphArchive's events
    def adaptation_fitted(self, model: str, seconds: float, used: int) -> None:
        self.adapt_fits.labels(model).observe(seconds)
        self.adapt_measurements.labels(model).observe(used)

    def knowledge_fitted(self, model: str, seconds: float, programs: int) -> None:
        self.knowledge_fits.labels(model).observe(seconds)
        self.knowledge_programs.labels(model).set(programs)

    def ranking_adapted(self, model: str, adapted: bool) -> None:
        self.rankings.labels(model, "true" if adapted else "false").inc()

    def store_error(self, op: str) -> None:
        self.store_errors.labels(op).inc()

    # xla_costmodel.service.core.generations.GenerationEvents
    def generation_lookup(self, hit: bool) -> None:
        self.generation_lookups.labels("hit" if hit else "read").inc()

    def generation_invalidated(self, source: str) -> None:
        self.generation_invalidations.labels(source).inc()

    def generation_subscription(self, live: bool) -> None:
        self.generation_subscribed.set(1 if live else 0)

    def generation_error(self, op: str) -> None:
        self.generation_errors.labels(op).inc()

    # xla_costmodel.service.store.engine.StatementCounter.listen
    def db_statement(self) -> None:
        self.db_statements.inc()

    # xla_costmodel.service.core.decisions.DecisionEvents, core.best.BestEvents
    def decision_stored(self, target: str, strategy: str) -> None:
        label = self._target(target)
        self.decisions.labels(label).inc()
        if strategy == REUSE:
            self.reuses.labels(label).inc()

    def best_lookup(self, target: str, result: str) -> None:
        self.best_lookups.labels(self._target(target), result).inc()

    def _target(self, target: str) -> str:
        if target in self._targets or len(self._targets) < TARGET_LABELS:
            self._targets.add(target)
            return target
        return OTHER_TARGET

    # xla_costmodel.service.core.feedback.FeedbackEvents
    def feedback_stored(
        self, model: str, version: str, measurements: int, quality: Quality
    ) -> None:
        self.feedback_measurements.labels(model).inc(measurements)
        if quality.kendall_tau is not None:
            self.online_kendall_tau.labels(model, version).set(quality.kendall_tau)
        if quality.top1_slowdown is not None:
            self.online_top1_slowdown.labels(model, version).set(quality.top1_slowdown)
