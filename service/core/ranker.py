"""Rank configs for a graph: the rank and upload flows, composed of the core's parts.

    Ranker.upload(req) -> UploadResult   validate a graph, cache its embedding
    Ranker.rank(req) -> RankResult       score every config, shape, sort, remember

The graph is validated, archived and embedded once per (model, version, graph) by
``graphs``; configs are scored in the ``scorer``'s bounded pool (a few scorer rows on
the loop); ``shaper`` blends in the graph's measurements and the target's knowledge.

The configs and scores of each answer are remembered per (model, version, graph_id,
ranking_id), so feedback may name configs by index into the answer it means (two
tuners ranking one graph never mix their batches): in Redis when configured (shared
by workers and replicas), else in a byte-bounded per-process LRU
(``xla_costmodel.service.core.recent``). Best-effort either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from xla_costmodel.service.core.cache import Source
from xla_costmodel.service.core.graph_meta import GraphMeta
from xla_costmodel.service.core.graphs import Graphs
from xla_costmodel.service.core.hlo import HloText
from xla_costmodel.service.core.inputs import Limits, RawGraph, check_configs
from xla_costmodel.service.core.raw_configs import RawConfigs
from xla_costmodel.service.core.recent import RecentRankings, new_ranking_id
from xla_costmodel.service.core.registry import ModelRegistry
from xla_costmodel.service.core.scoring import Scorer, stable_order
from xla_costmodel.service.core.shaping import Shaper, Shaping
from xla_costmodel.service.errors import InvalidRequest
from xla_costmodel.tpugraphs.arrays import Graph


@dataclass(frozen=True)
class UploadRequest:
    model: str
    model_version: str | None
    graph: RawGraph | HloText


@dataclass(frozen=True)
class RankRequest:
    """Exactly one of ``graph_id`` and ``graph`` (the decoders check: ``one_graph``)."""

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
    client: str = ""  # whose budget remembers the batch (``core/clients.py``)
    compiler: str | None = None  # to run under; None: the target's newest rows'


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


class Ranker:
    def __init__(
        self,
        registry: ModelRegistry,
        graphs: Graphs,
        scorer: Scorer,
        shaper: Shaper,
        recent: RecentRankings,
        limits: Limits,
    ) -> None:
        self.registry = registry
        self.graphs = graphs
        self.scorer = scorer
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
        runner = self.registry.get(req.model, req.model_version)
        if req.top_k is not None and not 1 <= req.top_k <= self.limits.max_configs:
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
        configs, scores = await self.scorer.scored(
            runner, embedding, checked, req.configs_field
        )
        adapted, portfolio, shaping = 0, None, None
        if req.adapt or req.portfolio:
            target = req.target or runner.manifest.target
            shaped = await self.shaper.shape(
                runner,
                embedding,
                configs,
                scores,
                target,
                gid,
                req.adapt,
                req.portfolio,
                req.compiler,
            )
            scores, adapted = shaped.scores, shaped.adapted
            portfolio, shaping = shaped.portfolio, shaped.shaping
        # Remember the batch as it came (int8 for layout), not its float32 copy.
        ranking_id = new_ranking_id()
        key = (runner.name, runner.version, gid, ranking_id)
        self.recent.remember(key, checked, scores, req.client)  # Redis: background
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
