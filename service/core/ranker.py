"""Rank configs for a graph: embed once per (model, version, graph), score per batch.

The encoder and scorer run in worker threads (onnxruntime releases the GIL), limited
to ``workers`` runs at once (a batch of at most ``INLINE_SCORE_ROWS`` scorer rows is
scored on the loop: quicker than the hop); the loop otherwise checks shapes, looks up
and sorts.

The configs and scores of recent rank requests are remembered per (model, version,
graph_id, ranking_id), so feedback may name configs by index into the answer it
means (two tuners ranking one graph never mix their batches): in Redis when configured (shared by
workers and replicas), else in a byte-bounded per-process LRU
(``xla_costmodel.service.core.recent``). Best-effort either way.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread
import numpy as np
import numpy.typing as npt

from xla_costmodel.runner import ArtifactRunner, Embedding
from xla_costmodel.service.core.adaptation import Adaptation, Observed
from xla_costmodel.service.core.cache import CacheKey, EmbeddingCache, Source
from xla_costmodel.service.core.graph_archive import GraphArchive
from xla_costmodel.service.core.graph_meta import GraphMeta
from xla_costmodel.service.core.hlo import HloText, check_hlo_size, featurize_graph
from xla_costmodel.service.core.inputs import (
    INLINE_BYTES,
    Limits,
    RawGraph,
    as_float32,
    build_graph,
    check_configs,
)
from xla_costmodel.service.core.knowledge import Entry as KnowledgeEntry
from xla_costmodel.service.core.knowledge import TargetKnowledge
from xla_costmodel.service.core.raw_configs import RawConfigs, encode_raw
from xla_costmodel.service.core.recent import RecentRankings
from xla_costmodel.service.core.registry import ModelRegistry
from xla_costmodel.service.errors import (
    GraphMetadataNotFound,
    GraphNotFound,
    InvalidRequest,
)
from xla_costmodel.service.store import StoreError
from xla_costmodel.tpugraphs.arrays import Graph
from xla_costmodel.tpugraphs.blend import Blended, Fit, Measured, blend, fit_now

T = TypeVar("T")
# (configs, scores); configs in their wire dtype (int8 layout batches stay 4x smaller)
Scored = tuple[np.ndarray[Any, Any], npt.NDArray[np.float32]]


class StageEvents(Protocol):
    """What the ranker reports (``xla_costmodel.service.metrics.Metrics`` implements it)."""

    def encoded(self, model: str, seconds: float) -> None: ...
    def scored(self, model: str, seconds: float, configs: int) -> None: ...


@dataclass(frozen=True)
class UploadRequest:
    model: str
    model_version: str | None
    graph: RawGraph | HloText


@dataclass(frozen=True)
class RankRequest:
    model: str
    model_version: str | None
    graph_id: str | None
    graph: RawGraph | HloText | None
    configs: Any  # arrays, or RawConfigs
    configs_field: str
    top_k: int | None = None
    target: str | None = None  # hardware to adapt to; default: the model's
    adapt: bool = True  # False: the model's prior alone
    portfolio: bool = False  # also answer the exploration order (blend.py)


@dataclass(frozen=True)
class UploadResult:
    graph_id: str
    nodes: int
    edges: int
    configurable_nodes: int
    cached: bool


@dataclass(frozen=True)
class RankResult:
    model: str
    model_version: str
    graph_id: str
    cache: Source
    scores: npt.NDArray[np.float32]  # scores[i] = config i, lower = faster
    ranking: npt.NDArray[np.int64]  # all indices, best first, ties by index
    top_k: npt.NDArray[np.int64]
    adapted: int = 0  # measurements of this graph that shaped the scores; 0: prior only
    ranking_id: str = ""  # names this answer's batch for feedback by config_indices
    portfolio: npt.NDArray[np.int64] | None = None  # every index, exploration order
    shaped: Shaping | None = None  # what else shaped the scores (None: the prior)


@dataclass(frozen=True)
class Shaping:
    """Besides this graph's measurements: the target's knowledge and the prior."""

    target_programs: int  # programs of the target (and, foreign, of others) it holds
    target_measurements: int
    knowledge_weight: float  # its share of the combined prior
    prior_weight: float  # the artifact's weight: 1, less if not trained on the target


class Ranker:
    def __init__(
        self,
        registry: ModelRegistry,
        cache: EmbeddingCache,
        limits: Limits,
        events: StageEvents,
        workers: int,
        chunk_rows: int,
        archive: GraphArchive,
        adaptation: Adaptation,
        knowledge: TargetKnowledge,
        recent_bytes: int = 16 << 20,
        shared_bytes: int = 0,  # of a batch remembered in Redis too; 0: none
    ) -> None:
        self.registry = registry
        self.cache = cache
        self.archive = archive
        self.adaptation = adaptation
        self.knowledge = knowledge
        self.limits = limits
        self.events = events
        self.chunk_rows = chunk_rows
        redis = cache.redis if shared_bytes else None
        self.recent = RecentRankings(recent_bytes, redis, cache.events, shared_bytes)
        self._limiter = anyio.CapacityLimiter(workers)

    async def upload(self, req: UploadRequest) -> UploadResult:
        """Validate a graph and make sure its embedding is cached."""
        runner = self.registry.get(req.model, req.model_version)
        graph, gid = await self.graph(req.graph, runner)
        _, source = await self.embed(runner, gid, graph)
        return UploadResult(
            gid,
            graph.num_nodes,
            graph.num_edges,
            graph.num_configurable,
            source != "miss",
        )

    async def rank(self, req: RankRequest) -> RankResult:
        """Score every config and sort them, best (lowest score) first."""
        runner = self.registry.get(req.model, req.model_version)
        if (req.graph is None) == (req.graph_id is None):
            raise InvalidRequest("give exactly one of graph_id or graph", "graph_id")
        if req.top_k is not None and not 1 <= req.top_k <= self.limits.max_configs:
            raise InvalidRequest(
                f"top_k must be in [1, {self.limits.max_configs}]", "top_k"
            )
        graph: Graph | None = None
        if req.graph is not None:
            graph, gid = await self.graph(req.graph, runner)
            embedding, source = await self.embed(runner, gid, graph)
        else:
            gid = str(req.graph_id)
            embedding, source = await self._cached(runner, gid)
        value = req.configs
        if isinstance(value, RawConfigs):
            value = await self._raw_configs(value, runner, gid)
        checked = check_configs(
            value, runner, embedding, req.configs_field, self.limits, graph
        )
        configs, scores = await self._scored(
            runner, embedding, checked, req.configs_field
        )
        adapted, portfolio, shaping = 0, None, None
        if req.adapt or req.portfolio:
            target = req.target or runner.manifest.target
            observed = entry = None
            if req.adapt:
                observed = await self.adaptation.observed(runner, target, gid)
                entry = self.knowledge.get(runner, target)
                if (
                    observed is not None
                    and observed.configs.shape[1:] != configs.shape[1:]
                ):
                    observed = None  # measured with another configurable-node count
            if observed is not None or entry is not None or req.portfolio:
                shaped = await self._run(
                    self._blend,
                    runner,
                    embedding,
                    configs,
                    scores,
                    target,
                    gid,
                    observed,
                    entry,
                    req.portfolio,
                )
                scores, adapted, portfolio = (
                    shaped.scores,
                    shaped.adapted,
                    shaped.portfolio,
                )
                shaping = Shaping(
                    shaped.target_programs,
                    shaped.target_measurements,
                    shaped.knowledge_weight,
                    shaped.prior_weight,
                )
            self.adaptation.events.ranking_adapted(runner.name, adapted > 0)
        # Remember the batch as it came (int8 for layout), not its float32 copy.
        ranking_id = uuid.uuid4().hex
        key = (runner.name, runner.version, gid, ranking_id)
        await self.recent.remember(key, checked, scores)
        ranking = stable_order(scores)
        k = len(ranking) if req.top_k is None else min(req.top_k, len(ranking))
        return RankResult(
            runner.name,
            runner.version,
            gid,
            source,
            scores,
            ranking,
            ranking[:k],
            adapted,
            ranking_id,
            portfolio,
            shaping,
        )

    def _blend(
        self,
        runner: ArtifactRunner,
        embedding: Embedding,
        configs: npt.NDArray[np.float32],
        prior: npt.NDArray[np.float32],
        target: str,
        gid: str,
        observed: Observed | None,
        entry: KnowledgeEntry | None,
        portfolio: bool,
    ) -> Blended:
        """``tpugraphs.blend`` in a worker thread: the fleet simulation runs the same
        function, so it measures what the service does."""

        def prior_of(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
            return self._score(runner, embedding, rows, "", False)[1]

        measured: Measured | None = None
        fit: Fit = fit_now
        if observed is not None:
            measured = Measured(
                observed.configs,
                observed.runtimes_ns.astype(np.float64),
                observed.distinct,
            )
            tag = (None if entry is None else entry.version,)
            fit = self.adaptation.fitter(runner, target, gid, observed, tag)
        return blend(
            configs,
            prior,
            None if entry is None else entry.knowledge,
            self.knowledge.summary(gid),
            measured,
            foreign=not runner.manifest.trained_on(target),
            prior_of=prior_of,
            fit=fit,
            min_measurements=self.adaptation.min_measurements,
            portfolio=portfolio,
            exclude=gid,
        )

    async def score(
        self, runner: ArtifactRunner, gid: str, value: Any, field: str
    ) -> Scored:
        """Validate and score configs for a known graph; nothing is remembered."""
        embedding, _ = await self._known(runner, gid)
        checked = check_configs(value, runner, embedding, field, self.limits)
        return await self._run(self._score, runner, embedding, checked, field, False)

    async def recall(
        self, runner: ArtifactRunner, gid: str, ranking_id: str
    ) -> Scored | None:
        """The configs and scores of a remembered rank answer of the graph."""
        return await self.recent.recall((runner.name, runner.version, gid, ranking_id))

    async def graph(
        self, raw: RawGraph | HloText, runner: ArtifactRunner
    ) -> tuple[Graph, str]:
        """Validate (HLO text: featurize, always off the loop), keep its record, and
        archive it in the measurement database on first sight (best-effort)."""
        meta: GraphMeta | None
        if isinstance(raw, HloText):
            check_hlo_size(raw, self.limits)
            # In the bounded pool: pure Python, seconds for a big module.
            graph, gid, meta = await self._run(
                featurize_graph, raw, runner.collection, self.limits
            )
        else:
            args = (raw, runner.collection, self.limits)
            if raw.nbytes <= INLINE_BYTES:
                graph, gid = build_graph(*args)
            else:
                graph, gid = await anyio.to_thread.run_sync(build_graph, *args)
            meta = GraphMeta.of_graph(graph)
        if meta is not None:
            await self.cache.meta.remember(gid, meta)
        if runner.manifest.spec.default_config is not None:  # knowledge needs one
            self.knowledge.remember(gid, graph.node_opcode)
        await self.archive.keep(gid, runner.collection, graph)
        return graph, gid

    async def _raw_configs(
        self, raw: RawConfigs, runner: ArtifactRunner, gid: str
    ) -> npt.NDArray[np.float32]:
        meta = None
        if runner.spec.per_node:  # raw configs name the graph's configurable nodes
            meta = await self.cache.meta.get(gid)
            if meta is None:
                raise GraphMetadataNotFound(
                    f"no record of graph {gid}'s configurable nodes (it was cached "
                    "before, or its record expired): re-upload it with PUT /v1/graphs, "
                    "or send it inline as hlo or graph",
                    raw.field,
                )
        return await anyio.to_thread.run_sync(
            encode_raw, raw, runner.collection, meta, self.limits.max_configs
        )

    async def embed(
        self, runner: ArtifactRunner, gid: str, graph: Graph
    ) -> tuple[Embedding, Source]:
        async def compute() -> Embedding:
            return await self._run(self._encode, runner, graph)

        key = CacheKey(runner.name, runner.version, gid)
        return await self.cache.get_or_compute(key, runner.embedding_shapes, compute)

    async def _known(
        self, runner: ArtifactRunner, gid: str
    ) -> tuple[Embedding, Source]:
        """The cached embedding, else one computed from the archived graph (feedback
        reaching a replica or a restart that never ranked this graph)."""
        try:
            return await self._cached(runner, gid)
        except GraphNotFound:
            try:
                graph = await self.archive.load(gid)
            except StoreError:
                graph = None
            # A graph of the model's shape (archived by another collection's model
            # too: a graph is stored once, by content).
            if (
                graph is None
                or (graph.node_config_ids is not None) != runner.spec.per_node
            ):
                raise
            return await self.embed(runner, gid, graph)

    async def _cached(
        self, runner: ArtifactRunner, gid: str
    ) -> tuple[Embedding, Source]:
        key = CacheKey(runner.name, runner.version, gid)
        found = await self.cache.lookup(key, runner.embedding_shapes)
        if found is None:
            raise GraphNotFound(
                f"graph {gid} is not cached for {runner.name} v{runner.version}; "
                "upload it with PUT /v1/graphs or send it inline",
                "graph_id",
            )
        return found

    def _encode(self, runner: ArtifactRunner, graph: Graph) -> Embedding:
        start = time.perf_counter()
        embedding = runner.encode(graph)
        self.events.encoded(runner.name, time.perf_counter() - start)
        return embedding

    def _score(
        self,
        runner: ArtifactRunner,
        embedding: Embedding,
        checked: np.ndarray[Any, Any],
        field: str,
        report: bool = True,  # False: not a rank request (feedback), not in its metrics
    ) -> Scored:
        """The float32 configs and their scores, in a worker thread: the conversion
        from the wire dtype passes over every value, so it stays off the loop too."""
        start = time.perf_counter()
        configs = as_float32(checked, field)
        rows_per_config = int(np.prod(configs.shape[1:-1], dtype=np.int64))
        step = max(1, self.chunk_rows // max(1, rows_per_config))
        parts = [
            runner.score(embedding, configs[i : i + step])
            for i in range(0, len(configs), step)
        ]
        scores = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if report:
            self.events.scored(runner.name, time.perf_counter() - start, len(configs))
        return configs, scores

    async def _scored(
        self,
        runner: ArtifactRunner,
        embedding: Embedding,
        checked: np.ndarray[Any, Any],
        field: str,
    ) -> Scored:
        """``_score``; on the loop for a few scorer rows, which take less time than the
        hop to a worker thread and back (tens of microseconds)."""
        if int(np.prod(checked.shape[:-1], dtype=np.int64)) <= INLINE_SCORE_ROWS:
            return self._score(runner, embedding, checked, field)
        return await self._run(self._score, runner, embedding, checked, field)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)


# Up to this many scorer rows (configs x configurable nodes), scoring runs on the event
# loop: the tile scorer takes ~20 us for 64 configs, the worker-thread hop more.
INLINE_SCORE_ROWS = 64
# Below this many scores numpy's stable argsort is as fast as the keyed sort.
KEYED_SORT_MIN = 2048


def stable_order(scores: npt.NDArray[np.float32]) -> npt.NDArray[np.int64]:
    """``np.argsort(scores, kind="stable")``: ascending, ties by index, NaN last.

    numpy's stable argsort of float32 is slow from a few thousand values on (10k:
    0.9 ms); one plain sort of 64-bit keys, the score's order-preserving bits above
    its index, gives the same order ~5x faster. -0.0 is made +0.0 and every NaN the
    positive one, so they tie and sort as numpy's comparisons do.
    """
    if len(scores) < KEYED_SORT_MIN:
        return np.argsort(scores, kind="stable").astype(np.int64)
    canonical = np.where(np.isnan(scores), np.float32(np.nan), scores + np.float32(0))
    bits = canonical.astype(np.float32, copy=False).view(np.uint32).astype(np.uint64)
    # Negative floats: flip every bit (more negative = smaller); others: set the sign.
    flip = np.where(bits >> 31, np.uint64(0xFFFFFFFF), np.uint64(0x80000000))
    keys = ((bits ^ flip) << 32) | np.arange(len(scores), dtype=np.uint64)
    keys.sort()
    return (keys & np.uint64(0xFFFFFFFF)).astype(np.int64)
