"""The core's factory: every component, wired once, on resources the lifespan opened.

    build_core(settings, metrics, redis, db, registry, alone=) -> Core
    await Core.aclose()                  what the core itself holds, in order

The lifespan opens Redis, the database and the model registry; ``build_core`` makes
the rest on them and hands each component its own collector of ``metrics``
(``CoreMetrics``: ``xla_costmodel.service.metrics.Metrics`` implements it, so the
core never imports prometheus_client). Nothing here runs I/O or starts a task: the
lifespan runs ``Core.loops`` (the periodic refreshes) in its task group.
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


class StoreEvents(Protocol):
    """What components with only failures to report report (auth, fleet, retention)."""

    def store_error(self, op: str) -> None: ...


class CoreMetrics(Protocol):
    """One collector per component, and the gauges that read the core's state."""

    @property
    def cache(self) -> ArchiveEvents: ...
    @property
    def generations(self) -> GenerationEvents: ...
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
    generations: Generations
    cache: EmbeddingCache
    recent: RecentRankings
    loops: tuple[Periodic, ...]  # the lifespan runs them

    async def aclose(self) -> None:
        """Close what the core holds, before the lifespan closes Redis under it."""
        await self.generations.aclose()  # its subscriber reads Redis
        await self.recent.aclose()  # remembered rankings on their way to Redis
        await self.cache.aclose()


def _limits(settings: Settings) -> Limits:
    return Limits(
        settings.max_nodes,
        settings.max_edges,
        settings.max_configs,
        settings.max_hlo_bytes,
        settings.max_hlo_instructions,
        settings.max_scored_bytes,
    )


def build_core(
    settings: Settings,
    metrics: CoreMetrics,
    redis: RedisStore | None,
    db: Database,
    registry: ModelRegistry,
    alone: bool,
) -> Core:
    """Every component on the open resources; ``alone``: this process is the
    database's only writer (``generations.is_alone``)."""
    generations = Generations(
        None if redis is None else redis.client,
        metrics.generations,
        freshness_s=settings.freshness_s,
        alone=alone,
        seal=None if redis is None else redis.seal,
    )
    pool = InferencePool(
        metrics.stages, settings.inference_workers, settings.score_chunk_rows
    )
    limits = _limits(settings)
    cache, graphs = _graphs(settings, metrics, redis, db, limits, pool)
    knowledge = TargetKnowledge(db, generations, metrics.knowledge, graphs)
    recent = _recent(settings, metrics, redis)
    adaptation = _adaptation(metrics, db, generations)
    shaper = Shaper(adaptation, knowledge, pool, metrics.shaping)
    fleet = FleetGain(db, metrics.stores)
    metrics.watch_fleet(lambda: fleet.snapshot, settings.fleet_max_targets)
    metrics.watch_ready(lambda: registry.ready)
    feedback = FeedbackRecorder(
        registry,
        FeedbackScorer(graphs, pool, recent, limits),
        FeedbackStore(
            db, graphs.archive, generations, metrics.feedback, _quota(settings)
        ),
        metrics.feedback,
    )
    return Core(
        ranker=Ranker(registry, graphs, pool, shaper, recent, limits),
        feedback=feedback,
        decisions=DecisionRecorder(
            registry, db, generations, limits, metrics.decisions, _quota(settings)
        ),
        best=BestLookup(registry, db, DecisionCache(generations), metrics.best),
        feedback_auth=FeedbackAuth(db, settings.feedback_auth, metrics.stores),
        clients=ClientIds(db),
        fleet=fleet,
        knowledge=knowledge,
        generations=generations,
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
    memory = embedding_memory(settings.memory_cache_bytes)
    metrics.watch_memory(lambda: memory.used, lambda: len(memory))
    cache = EmbeddingCache(memory, redis, metrics.cache)
    archive = GraphArchive(db, metrics.cache, redis)
    records = GraphMetaStore(redis, metrics.cache)
    graphs = Graphs(limits, cache, records, archive, pool)
    return cache, graphs


def _recent(
    settings: Settings, metrics: CoreMetrics, redis: RedisStore | None
) -> RecentRankings:
    return RecentRankings(
        settings.recent_rankings_bytes,
        redis if settings.shared_ranking_bytes else None,
        metrics.cache,
        settings.shared_ranking_bytes,
        settings.recent_client_bytes,
    )


def _adaptation(
    metrics: CoreMetrics, db: Database, generations: Generations
) -> Adaptation:
    return Adaptation(db, generations, metrics.adaptation)


def _quota(settings: Settings) -> Quota | None:
    """The per-writer feedback quota; None when both bounds are 0 (off)."""
    quota = Quota(
        settings.feedback_quota_rows,
        settings.feedback_quota_window_s,
        settings.feedback_quota_graph_bytes,
    )
    return quota if quota.rows or quota.graph_bytes else None


def _loops(
    settings: Settings,
    metrics: CoreMetrics,
    db: Database,
    knowledge: TargetKnowledge,
    fleet: FleetGain,
) -> tuple[Periodic, ...]:
    """The periodic refreshes: target knowledge, the fleet summary, retention."""
    retention = Retention(
        db, settings.graph_retention_s, settings.idempotency_retention_s, metrics.stores
    )
    sweeper = retention.sweeper(settings.retention_sweep_s)
    return (
        knowledge.refresher(settings.knowledge_refresh_s),
        fleet.refresher(settings.fleet_refresh_s),  # off the request path
        *([] if sweeper is None else [sweeper]),
    )
