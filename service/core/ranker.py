"""Rank configs for a graph: the rank and upload flows, composed of the core's parts.

    Ranker.upload(req) -> UploadResult   validate a graph, cache its embedding
    Ranker.rank(req) -> RankResult       score every config, shape, sort, remember

The graph is validated, archived and embedded once per (model, version, graph) by
``graphs``; configs are scored in the bounded inference ``pool`` (a few scorer rows
on the loop); ``shaper`` blends in the graph's measurements and the target's
knowledge, given the scored ``Batch`` and the request's ``RankOptions``.

The configs and scores of each answer are remembered per (model, version, graph_id,
ranking_id), so feedback may name configs by index into the answer it means (two
tuners ranking one graph never mix their batches): in Redis when configured (shared
by workers and replicas), else in a byte-bounded per-process LRU
(``xla_costmodel.service.core.recent``). Best-effort either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from xla_costmodel.service.core.cache import FoundIn
from xla_costmodel.service.core.errors import InvalidRequest
from xla_costmodel.service.core.graph_meta import GraphMeta
from xla_costmodel.service.core.graphs import Graphs
from xla_costmodel.service.core.inference import InferencePool, stable_order
from xla_costmodel.service.core.inputs import Limits, check_configs
from xla_costmodel.service.core.raw_configs import RawConfigs
from xla_costmodel.service.core.recent import (
    RankingKey,
    RecentRankings,
    new_ranking_id,
)
from xla_costmodel.service.core.registry import ModelRegistry
from xla_costmodel.service.core.requests import RankRequest, UploadRequest
from xla_costmodel.service.core.shaping import Batch, Shaper
from xla_costmodel.tpugraphs.arrays import Graph
from xla_costmodel.tpugraphs.blend import Shaping


@dataclass(frozen=True)
class UploadResult:
    graph_id: str
    nodes: int
    edges: int
    configurable_nodes: int
    cached: bool


@dataclass(frozen=True, kw_only=True)
class RankResult:
    model: str
    model_version: str
    graph_id: str
    cache: FoundIn
    scores: npt.NDArray[np.float32]  # scores[i] = config i, lower = faster
    ranking: npt.NDArray[np.int64]  # all indices, best first, ties by index
    top_k: npt.NDArray[np.int64]
    ranking_id: str  # names this answer's batch for feedback by config_indices
    portfolio: npt.NDArray[np.int64] | None  # every index, exploration order
    shaping: Shaping  # what shaped the scores besides the prior


class Ranker:
    def __init__(
        self,
        registry: ModelRegistry,
        graphs: Graphs,
        pool: InferencePool,
        shaper: Shaper,
        recent: RecentRankings,
        limits: Limits,
    ) -> None:
        self.registry = registry
        self.graphs = graphs
        self.pool = pool
        self.shaper = shaper
        self.recent = recent
        self.limits = limits

    async def upload(self, req: UploadRequest) -> UploadResult:
        """Validate a graph and make sure its embedding is cached."""
        runner = self.registry.get(req.model, req.model_version)
        graph, gid = await self.graphs.graph(req.graph, runner)
        _, source = await self.graphs.embed(runner, gid, graph)
        return UploadResult(
            gid,
            graph.num_nodes,
            graph.num_edges,
            graph.num_configurable,
            source != "miss",
        )

    async def rank(self, req: RankRequest) -> RankResult:
        """Score every config and sort them, best (lowest score) first."""
        options = req.options
        runner = self.registry.get(req.model, options.model_version)
        if (
            options.top_k is not None
            and not 1 <= options.top_k <= self.limits.max_configs
        ):
            raise InvalidRequest(
                f"top_k must be in [1, {self.limits.max_configs}]", "top_k"
            )
        graph: Graph | None = None
        sent: GraphMeta | None = None  # the record of a graph sent inline
        if req.graph is not None:
            graph, gid, sent = await self.graphs.admit(req.graph, runner)
            embedding, source = await self.graphs.embed(runner, gid, graph)
        else:
            gid = str(req.graph_id)
            embedding, source = await self.graphs.cached(runner, gid)
        value = req.configs
        if isinstance(value, RawConfigs):
            value = await self.graphs.raw_configs(value, runner, gid, sent)
        checked = check_configs(
            value, runner, embedding, req.configs_field, self.limits, graph
        )
        configs, scores = await self.pool.scored(
            runner, embedding, checked, req.configs_field
        )
        portfolio, shaping = None, Shaping()
        if options.adapt or options.portfolio:
            summary = self.graphs.summary(gid)
            batch = Batch(runner, gid, embedding, summary, configs, scores)
            blended = await self.shaper.shape(batch, options)
            scores, portfolio, shaping = (
                blended.scores,
                blended.portfolio,
                blended.shaping,
            )
        # Remember the batch as it came (int8 for layout), not its float32 copy.
        ranking_id = new_ranking_id()
        key = RankingKey(runner.name, runner.version, gid, ranking_id)
        self.recent.remember(key, checked, scores, req.client)  # Redis: background
        ranking = stable_order(scores)
        k = len(ranking) if options.top_k is None else min(options.top_k, len(ranking))
        return RankResult(
            model=runner.name,
            model_version=runner.version,
            graph_id=gid,
            cache=source,
            scores=scores,
            ranking=ranking,
            top_k=ranking[:k],
            ranking_id=ranking_id,
            portfolio=portfolio,
            shaping=shaping,
        )
