"""The core's factory: every component, wired once, on resources the lifespan opened.

    build_core(settings, metrics, redis, db, registry, alone=) -> Core
    await Core.aclose()                  what the core itself holds, in order

The lifespan opens Redis, the database and the model registry; ``build_core`` makes
the rest on them and hands each component its own collector of ``metrics``
(``CoreMetrics``: ``xla_costmodel.service.metrics.Metrics`` implements it, so the
core never imports prometheus_client). Nothing here runs I/O or starts a task: the
lifespan runs ``Core.bus.listen`` (other processes' events) and ``Core.loops`` (the
periodic refreshes) in its task group. ``build_core`` also wires who hears which
writes: the bus's subscribers (``events.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from xla_costmodel.service.core.adaptation import Adaptation, AdaptEvents
from xla_costmodel.service.core.auth import FeedbackAuth
from xla_costmodel.service.core.best import BestEvents, BestLookup
from xla_costmodel.service.core.cache import EmbeddingCache, embedding_memory
from xla_costmodel.service.core.clients import ClientIds
from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.decision_cache import DecisionCache
from xla_costmodel.service.core.decisions import DecisionEvents, DecisionRecorder
from xla_costmodel.service.core.event_bus import BusEvents, Channel, EventBus
from xla_costmodel.service.core.feedback import FeedbackEvents, FeedbackRecorder
from xla_costmodel.service.core.feedback_scorer import FeedbackScorer
from xla_costmodel.service.core.feedback_store import FeedbackStore
from xla_costmodel.service.core.fleet import FleetGain, FleetSnapshot
from xla_costmodel.service.core.generations import GenerationEvents, Generations
from xla_costmodel.service.core.graph_archive import ArchiveEvents, GraphArchive
from xla_costmodel.service.core.graph_meta import GraphMetaStore
from xla_costmodel.service.core.graphs import Graphs
from xla_costmodel.service.core.inference import InferencePool, StageEvents
from xla_costmodel.service.core.inputs import Limits
from xla_costmodel.service.core.knowledge import KnowledgeEvents, TargetKnowledge
from xla_costmodel.service.core.periodic import Periodic
from xla_costmodel.service.core.ranker import Ranker
from xla_costmodel.service.core.recent import RecentRankings
from xla_costmodel.service.core.redis_store import RedisStore
from xla_costmodel.service.core.registry import ModelRegistry
from xla_costmodel.service.core.retention import Retention
from xla_costmodel.service.core.shaping import ShapeEvents, Shaper
from xla_costmodel.service.settings import Settings
from xla_costmodel.service.store import Quota

# Former settings (docs/settings.md), now constants of the components they size.
# Configs x configurable nodes scored per ONNX run: small enough that the layout
# scorer's per-row intermediates stay in cache and the onnxruntime arena stays small
# (1,001 nlp configs cost ~20% less server CPU than at 262,144, bench/README.md;
# 8,192-65,536 measured the same).
SCORE_CHUNK_ROWS = 32_768
# With Redis, rank batches up to this size are remembered there too, so feedback by
# index reaches any worker or replica (a Redis SET per rank, in the background).
SHARED_RANKING_BYTES = 8 << 20
IDEMPOTENCY_RETENTION_S = 7 * 24 * 3600  # feedback Idempotency-Keys, then forgotten
# The per-writer quota's window, and the compressed graph bytes a writer's feedback
# may archive in it, beside COSTMODEL_FEEDBACK_QUOTA_ROWS measurements.
QUOTA_WINDOW_S = 3600
QUOTA_GRAPH_BYTES = 1 << 30


class StoreEvents(Protocol):
    """What components with only failures to report report (auth, fleet, retention)."""

    def store_error(self, op: str) -> None: ...


class NotifyEvents(GenerationEvents, BusEvents, Protocol):
    """What the generations and the event bus report: one collector (the bus's
    metrics kept their names from when generations owned the subscription)."""


class CoreMetrics(Protocol):
    """One collector per component, and the gauges that read the core's state."""

    @property
    def cache(self) -> ArchiveEvents: ...
    @property
    def generations(self) -> NotifyEvents: ...
    @property
    def stages(self) -> StageEvents: ...
    @property
    def adaptation(self) -> AdaptEvents: ...
    @property
    def knowledge(self) -> KnowledgeEvents: ...
    @property
    def shaping(self) -> ShapeEvents: ...
    @property
    def feedback(self) -> FeedbackEvents: ...
    @property
    def decisions(self) -> DecisionEvents: ...
    @property
    def best(self) -> BestEvents: ...
    @property
    def stores(self) -> StoreEvents: ...

    def watch_memory(
        self, nbytes: Callable[[], float], entries: Callable[[], float]
    ) -> None: ...
    def watch_ready(self, ready: Callable[[], bool]) -> None: ...
    def watch_fleet(
        self, snapshot: Callable[[], FleetSnapshot], targets: int
    ) -> None: ...


@dataclass(frozen=True)
class Core:
    """What routes and the lifespan use; everything else is inside these."""

    ranker: Ranker
    feedback: FeedbackRecorder
    decisions: DecisionRecorder
    best: BestLookup
    feedback_auth: FeedbackAuth
    clients: ClientIds
    fleet: FleetGain
    knowledge: TargetKnowledge
    bus: EventBus  # the lifespan runs its listener
    cache: EmbeddingCache
    recent: RecentRankings
    loops: tuple[Periodic, ...]  # the lifespan runs them

    async def aclose(self) -> None:
        """Close what the core holds, before the lifespan closes Redis under it."""
        await self.recent.aclose()  # remembered rankings on their way to Redis
        await self.cache.aclose()


def build_core(
    settings: Settings,
    metrics: CoreMetrics,
    redis: RedisStore | None,
    db: Database,
    registry: ModelRegistry,
    alone: bool,
) -> Core:
    """Every component on the open resources; ``alone``: this process is the
    database's only writer (``event_bus.is_alone``)."""
    bus = _bus(settings, metrics, redis, alone)
    generations = Generations(bus.trust_s, metrics.generations)
    decision_cache = DecisionCache(bus.trust_s)
    pool = InferencePool(
        metrics.stages, settings.scoring.inference_workers, SCORE_CHUNK_ROWS
    )
    limits = Limits(**settings.limits.model_dump())
    cache, graphs = _graphs(settings, metrics, redis, db, limits, pool)
    knowledge = TargetKnowledge(db, generations, metrics.knowledge, graphs)
    # Each subscriber acts on the events that concern it (``events.py``).
    for subscriber in (generations.heard, decision_cache.heard, knowledge.heard):
        bus.subscribe(subscriber)
    recent = _recent(settings, metrics, redis)
    adaptation = _adaptation(metrics, db, generations)
    shaper = Shaper(adaptation, knowledge, pool, metrics.shaping)
    fleet = FleetGain(db, metrics.stores)
    metrics.watch_fleet(lambda: fleet.snapshot, settings.developer.fleet_max_targets)
    metrics.watch_ready(lambda: registry.ready)
    feedback = FeedbackRecorder(
        registry,
        FeedbackScorer(graphs, pool, recent, limits),
        FeedbackStore(db, graphs.archive, bus, metrics.feedback, _quota(settings)),
        metrics.feedback,
    )
    return Core(
        ranker=Ranker(registry, graphs, pool, shaper, recent, limits),
        feedback=feedback,
        decisions=DecisionRecorder(
            registry, db, bus, limits, metrics.decisions, _quota(settings)
        ),
        best=BestLookup(registry, db, decision_cache, metrics.best),
        feedback_auth=FeedbackAuth(db, settings.feedback.feedback_auth, metrics.stores),
        clients=ClientIds(db),
        fleet=fleet,
        knowledge=knowledge,
        bus=bus,
        cache=cache,
        recent=recent,
        loops=_loops(settings, metrics, db, knowledge, fleet),
    )


def _graphs(
    settings: Settings,
    metrics: CoreMetrics,
    redis: RedisStore | None,
    db: Database,
    limits: Limits,
    pool: InferencePool,
) -> tuple[EmbeddingCache, Graphs]:
    """The embedding cache, and the graphs (archived, described, embedded) over it."""
    memory = embedding_memory(settings.caches.memory_cache_bytes)
    metrics.watch_memory(lambda: memory.used, lambda: len(memory))
    cache = EmbeddingCache(memory, redis, metrics.cache)
    archive = GraphArchive(db, metrics.cache, redis)
    records = GraphMetaStore(redis, metrics.cache)
    graphs = Graphs(limits, cache, records, archive, pool)
    return cache, graphs


def _bus(
    settings: Settings, metrics: CoreMetrics, redis: RedisStore | None, alone: bool
) -> EventBus:
    """The event bus, over Redis's pub/sub when there is Redis (sealed as its values)."""
    channel = None if redis is None else Channel(redis=redis.client, seal=redis.seal)
    freshness_s = settings.developer.freshness_s
    return EventBus(channel, metrics.generations, freshness_s=freshness_s, alone=alone)


def _recent(
    settings: Settings, metrics: CoreMetrics, redis: RedisStore | None
) -> RecentRankings:
    caches = settings.caches
    return RecentRankings(
        caches.recent_rankings_bytes,
        redis,
        metrics.cache,
        shared_bytes=SHARED_RANKING_BYTES,
        client_bytes=caches.recent_client_bytes,
    )


def _adaptation(
    metrics: CoreMetrics, db: Database, generations: Generations
) -> Adaptation:
    return Adaptation(db, generations, metrics.adaptation)


def _quota(settings: Settings) -> Quota | None:
    """The per-writer feedback quota; None when its rows are 0 (off, both bounds)."""
    rows = settings.feedback.feedback_quota_rows
    if not rows:
        return None
    return Quota(rows=rows, window_s=QUOTA_WINDOW_S, graph_bytes=QUOTA_GRAPH_BYTES)


def _loops(
    settings: Settings,
    metrics: CoreMetrics,
    db: Database,
    knowledge: TargetKnowledge,
    fleet: FleetGain,
) -> tuple[Periodic, ...]:
    """The periodic refreshes: target knowledge, the fleet summary, retention."""
    retention = Retention(
        db,
        settings.feedback.graph_retention_s,
        IDEMPOTENCY_RETENTION_S,
        metrics.stores,
    )
    sweeper = retention.sweeper(settings.developer.retention_sweep_s)
    return (
        knowledge.refresher(settings.refresh.knowledge_refresh_s),
        fleet.refresher(settings.refresh.fleet_refresh_s),  # off the request path
        *([] if sweeper is None else [sweeper]),
    )
