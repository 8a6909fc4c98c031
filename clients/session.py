"""Tuning sessions: one model version for every answer of an autotuning run.

A service may load a newer version mid-run; scores from two versions are not
comparable, so a session keeps the version of its first (non-degraded) answer and
sends it on every later call. If that version is unloaded, the service answers 409
and the call raises ``VersionNotLoaded`` rather than silently switching.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from xla_costmodel.clients.errors import ProtocolError
from xla_costmodel.clients.feedback_options import FeedbackOptions
from xla_costmodel.clients.payloads import GraphInput
from xla_costmodel.clients.rank_options import RankOptions
from xla_costmodel.clients.retry import Deadline
from xla_costmodel.clients.wire import FeedbackResult, RankResult

Runtimes = Sequence[int] | np.ndarray[Any, Any]
DeadlineArg = float | Deadline | None


# What a session needs of its client. Declared here rather than imported, so the
# clients (which create sessions) and the sessions do not import each other.
class Ranks(Protocol):
    def rank_with(
        self, model: str, graph: GraphInput, configs: Any, options: RankOptions
    ) -> RankResult: ...

    def feedback_with(
        self,
        model: str,
        graph: GraphInput,
        runtimes_ns: Runtimes,
        options: FeedbackOptions,
    ) -> FeedbackResult: ...


class AsyncRanks(Protocol):
    async def rank_with(
        self, model: str, graph: GraphInput, configs: Any, options: RankOptions
    ) -> RankResult: ...

    async def feedback_with(
        self,
        model: str,
        graph: GraphInput,
        runtimes_ns: Runtimes,
        options: FeedbackOptions,
    ) -> FeedbackResult: ...


class _Pin:
    def __init__(
        self,
        model: str,
        model_version: str | None,
        target: str | None = None,
        compiler: str | None = None,
    ) -> None:
        self.model = model
        self.model_version = model_version
        self.target = target  # the hardware this session measures on
        # and the compiler ("jaxlib 0.10.2"; None: unknown), named in ranks and reports
        self.compiler = compiler
        self.last_ranking_id: str | None = None  # of the latest answer

    def _options(
        self,
        top_k: int | None,
        deadline: DeadlineArg,
        fallback: Sequence[int] | None,
        adapt: bool,
        portfolio: bool,
    ) -> RankOptions:
        """A rank's options, with the session's version, target and compiler."""
        return RankOptions(
            top_k=top_k,
            deadline=deadline,
            fallback=fallback,
            model_version=self.model_version,
            target=self.target,
            compiler=self.compiler,
            adapt=adapt,
            portfolio=portfolio,
        )

    def _feedback_options(
        self,
        configs: Any | None,
        config_indices: Sequence[int] | None,
        ranking_id: str | None,
        deadline: DeadlineArg,
    ) -> FeedbackOptions:
        """A report's options, with the session's version, target and compiler;
        indices without a ranking_id mean the session's latest answer."""
        if not ranking_id:
            ranking_id = None if config_indices is None else self.last_ranking_id
        return FeedbackOptions(
            configs=configs,
            config_indices=config_indices,
            ranking_id=ranking_id,
            model_version=self.model_version,
            target=self.target,
            compiler=self.compiler,
            deadline=deadline,
        )

    def _pin(self, result: RankResult) -> RankResult:
        if result.degraded:
            return result
        self.last_ranking_id = result.ranking_id
        if self.model_version is None:
            self.model_version = result.model_version
        elif result.model_version != self.model_version:
            raise ProtocolError(
                f"session pinned {self.model}:{self.model_version} "
                f"but the service answered with version {result.model_version}"
            )
        return result


class TuningSession(_Pin):
    """``client.session(model)``: ``rank``/``feedback`` with the model version pinned."""

    def __init__(
        self,
        client: Ranks,
        model: str,
        model_version: str | None = None,
        target: str | None = None,
        compiler: str | None = None,
    ) -> None:
        super().__init__(model, model_version, target, compiler)
        self.client = client

    def rank(
        self,
        graph: GraphInput,
        configs: Any,
        *,
        top_k: int | None = None,
        deadline: float | Deadline | None = None,
        fallback: Sequence[int] | None = None,
        adapt: bool = True,
        portfolio: bool = False,
    ) -> RankResult:
        options = self._options(top_k, deadline, fallback, adapt, portfolio)
        result = self.client.rank_with(self.model, graph, configs, options)
        return self._pin(result)

    def feedback(
        self,
        graph: GraphInput,
        runtimes_ns: Runtimes,
        *,
        configs: Any | None = None,
        config_indices: Sequence[int] | None = None,
        ranking_id: str | None = None,
        deadline: float | Deadline | None = None,
    ) -> FeedbackResult:
        options = self._feedback_options(configs, config_indices, ranking_id, deadline)
        return self.client.feedback_with(self.model, graph, runtimes_ns, options)


class AsyncTuningSession(_Pin):
    """The asyncio twin of ``TuningSession``."""

    def __init__(
        self,
        client: AsyncRanks,
        model: str,
        model_version: str | None = None,
        target: str | None = None,
        compiler: str | None = None,
    ) -> None:
        super().__init__(model, model_version, target, compiler)
        self.client = client

    async def rank(
        self,
        graph: GraphInput,
        configs: Any,
        *,
        top_k: int | None = None,
        deadline: float | Deadline | None = None,
        fallback: Sequence[int] | None = None,
        adapt: bool = True,
        portfolio: bool = False,
    ) -> RankResult:
        options = self._options(top_k, deadline, fallback, adapt, portfolio)
        result = await self.client.rank_with(self.model, graph, configs, options)
        return self._pin(result)

    async def feedback(
        self,
        graph: GraphInput,
        runtimes_ns: Runtimes,
        *,
        configs: Any | None = None,
        config_indices: Sequence[int] | None = None,
        ranking_id: str | None = None,
        deadline: float | Deadline | None = None,
    ) -> FeedbackResult:
        options = self._feedback_options(configs, config_indices, ranking_id, deadline)
        return await self.client.feedback_with(self.model, graph, runtimes_ns, options)
