"""What a tuner measured, checked and scored as ranking would score it.

    FeedbackScorer.runtimes(values) -> int64 [C]     1 to ``max_configs`` runtimes
    await FeedbackScorer.graph_id(runner, graph, graph_id) -> gid
                                                     an inline graph validated, held
                                                     and embedded; else the id sent
    await FeedbackScorer.score(runner, gid, configs) -> (configs, scores)
                                                     validated, scored by the model
    await FeedbackScorer.pick(runner, gid, indices, ranking_id) -> (configs, scores)
                                                     picked from the rank answer

Its own step, not the ranker's: a graph by id may be one this process never ranked
(``Graphs.known`` embeds it from the graph held or archived, where ranking needs it
cached), and feedback's scoring is always in the pool and never counted in the rank
metrics. Configs by index need the ``ranking_id`` of the answer they index, which
``RecentRankings`` remembers best-effort (409 ``ranking_not_found`` once it is gone).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from xla_costmodel.runner import ArtifactRunner
from xla_costmodel.service.core.errors import InvalidRequest, RankingNotFound
from xla_costmodel.service.core.graphs import Graphs
from xla_costmodel.service.core.hlo import HloText
from xla_costmodel.service.core.inference import InferencePool, Scored
from xla_costmodel.service.core.inputs import (
    Limits,
    RawGraph,
    check_configs,
    upgraded,
)
from xla_costmodel.service.core.recent import RankingKey, RecentRankings

INT64_MAX = (1 << 63) - 1


class FeedbackScorer:
    """``graphs`` and ``pool`` score the configs as ranking does; ``recent`` finds
    the rank answer that config indices index; ``limits`` bound what is sent."""

    def __init__(
        self,
        graphs: Graphs,
        pool: InferencePool,
        recent: RecentRankings,
        limits: Limits,
    ) -> None:
        self.graphs = graphs
        self.pool = pool
        self.recent = recent
        self.limits = limits

    def runtimes(self, values: Sequence[int]) -> npt.NDArray[np.int64]:
        """The measured runtimes, each in [1, 2^63-1] ns."""
        if not values:
            raise InvalidRequest("no runtimes given", "runtimes_ns")
        if len(values) > self.limits.max_configs:
            raise InvalidRequest(
                f"more than {self.limits.max_configs} runtimes", "runtimes_ns"
            )
        for i, value in enumerate(values):
            if not 0 < value <= INT64_MAX:
                raise InvalidRequest(
                    f"runtimes must be in [1, 2^63-1] ns, got {value}",
                    f"runtimes_ns[{i}]",
                )
        return np.asarray(values, np.int64)

    async def graph_id(
        self,
        runner: ArtifactRunner,
        graph: RawGraph | HloText | None,
        graph_id: str | None,
    ) -> str:
        """The id of the graph sent inline (validated, held for archiving, its
        embedding cached), else the id sent."""
        if graph is None:
            return str(graph_id)
        admitted, gid = await self.graphs.graph(graph, runner)
        await self.graphs.embed(runner, gid, admitted)
        return gid

    async def score(self, runner: ArtifactRunner, gid: str, value: Any) -> Scored:
        """Validate and score configs for a known graph; nothing is remembered."""
        embedding, _ = await self.graphs.known(runner, gid)
        checked = check_configs(value, runner, embedding, "configs", self.limits)
        return await self.pool.run(
            self.pool.score, runner, embedding, checked, "configs", False
        )

    async def pick(
        self, runner: ArtifactRunner, gid: str, indices: Sequence[int], ranking_id: str
    ) -> Scored:
        """The configs at ``indices`` of the rank answer ``ranking_id``, with the
        scores that answer gave them."""
        if not indices:
            raise InvalidRequest("no config indices given", "config_indices")
        if len(indices) > self.limits.max_configs:
            raise InvalidRequest(
                f"more than {self.limits.max_configs} indices", "config_indices"
            )
        key = RankingKey(runner.name, runner.version, gid, ranking_id)
        recalled = await self.recent.recall(key)
        if recalled is None:
            raise RankingNotFound(
                f"ranking {ranking_id} of graph {gid} with {runner.name} "
                f"v{runner.version} is not remembered (rankings are kept best-effort "
                "for a day: in Redis when the service has one, else per process); "
                "send the configs instead",
                "ranking_id",
            )
        configs, scores = recalled
        # A ranking an older release remembered (Redis outlives a rolling upgrade)
        # holds an older spec's rows: stored as today's.
        configs = upgraded(configs, runner)
        for i, index in enumerate(indices):
            if not 0 <= index < len(scores):
                raise InvalidRequest(
                    f"index {index} is out of range: ranking {ranking_id} had "
                    f"{len(scores)} configs",
                    f"config_indices[{i}]",
                )
        picked = np.asarray(indices, np.int64)
        return configs[picked], scores[picked]
