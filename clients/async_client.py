"""``AsyncCostModelClient``: the asyncio twin of ``CostModelClient``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar, cast

import httpx
import numpy as np

from xla_costmodel.clients.errors import (
    CostModelError,
    NoDecision,
    ServiceUnavailable,
)
from xla_costmodel.clients.exchange import (
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    ClientCore,
    DeadlineArg,
    fallback_or_raise,
    unlearned_fallback,
)
from xla_costmodel.clients.feedback_options import FeedbackOptions
from xla_costmodel.clients.operations import (
    Flow,
    best_flow,
    collection_flow,
    decision_flow,
    feedback_flow,
    models_flow,
    upload_flow,
)
from xla_costmodel.clients.payloads import GraphInput, prepare_graph
from xla_costmodel.clients.rank_options import RankOptions
from xla_costmodel.clients.retry import Deadline, RetryPolicy
from xla_costmodel.clients.session import AsyncTuningSession
from xla_costmodel.clients.wire import (
    BestKnown,
    Call,
    Decision,
    DecisionResult,
    FeedbackResult,
    GraphInfo,
    ModelInfo,
    RankResult,
)

T = TypeVar("T")


class AsyncCostModelClient(ClientCore):
    """The asyncio twin of ``CostModelClient``: same arguments, awaitable methods."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        limits: httpx.Limits = DEFAULT_LIMITS,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
        default_deadline: float | None = None,
        token: str | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(timeout, limits, retry, default_deadline, token)
        self._sleep = sleep
        self._http = httpx.AsyncClient(
            base_url=base_url,
            timeout=self.timeout,
            headers=self._headers(headers),
            transport=transport or httpx.AsyncHTTPTransport(limits=limits, retries=0),
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    @property
    def base_url(self) -> str:
        """The service's URL, as httpx normalised ``base_url`` (a path ends in "/")."""
        return str(self._http.base_url)

    async def rank(
        self,
        model: str,
        graph: GraphInput,
        configs: Any,
        *,
        top_k: int | None = None,
        deadline: DeadlineArg = None,
        fallback: Sequence[int] | None = None,
        model_version: str | None = None,
        target: str | None = None,
        adapt: bool = True,
        portfolio: bool = False,
    ) -> RankResult:
        """See ``CostModelClient.rank``."""
        options = RankOptions(
            top_k=top_k,
            deadline=deadline,
            fallback=fallback,
            model_version=model_version,
            target=target,
            adapt=adapt,
            portfolio=portfolio,
        )
        return await self.rank_with(model, graph, configs, options)

    async def rank_with(
        self, model: str, graph: GraphInput, configs: Any, options: RankOptions
    ) -> RankResult:
        """``rank`` with its keywords as one ``RankOptions`` (what sessions send)."""
        limit = self._deadline(options.deadline)  # client-side preparation counts too
        with self._forgetting(model):
            try:
                spec = await self._run(collection_flow(model, self.collections), limit)
            except ServiceUnavailable as exc:
                return unlearned_fallback(exc, options, graph, configs, model)
            prepared, n, flow = self._prepare_rank(spec, model, graph, configs, options)
            try:
                return await self._run(flow, limit)
            except ServiceUnavailable as exc:
                return fallback_or_raise(exc, options, prepared, n, model)

    async def upload_graph(
        self,
        model: str,
        graph: GraphInput,
        *,
        model_version: str | None = None,
        deadline: DeadlineArg = None,
    ) -> GraphInfo:
        limit = self._deadline(deadline)
        return await self._run(
            upload_flow(model, prepare_graph(graph), model_version, self.known_graphs),
            limit,
        )

    async def feedback(
        self,
        model: str,
        graph: GraphInput,
        runtimes_ns: Sequence[int] | np.ndarray[Any, Any],
        *,
        configs: Any | None = None,
        config_indices: Sequence[int] | None = None,
        ranking_id: str | None = None,
        model_version: str | None = None,
        target: str | None = None,
        compiler: str | None = None,
        deadline: DeadlineArg = None,
    ) -> FeedbackResult:
        """See ``CostModelClient.feedback``."""
        options = FeedbackOptions(
            configs=configs,
            config_indices=config_indices,
            ranking_id=ranking_id,
            model_version=model_version,
            target=target,
            compiler=compiler,
            deadline=deadline,
        )
        return await self.feedback_with(model, graph, runtimes_ns, options)

    async def feedback_with(
        self,
        model: str,
        graph: GraphInput,
        runtimes_ns: Sequence[int] | np.ndarray[Any, Any],
        options: FeedbackOptions,
    ) -> FeedbackResult:
        """See ``CostModelClient.feedback_with``."""
        limit = self._deadline(options.deadline)
        with self._forgetting(model):
            spec = None  # configs are built for the model's collection
            if options.configs is not None:
                spec = await self._run(collection_flow(model, self.collections), limit)
            prepared = prepare_graph(graph, options.configs, spec)
            flow = feedback_flow(
                model, prepared, runtimes_ns, options, spec, self.known_graphs
            )
            return await self._run(flow, limit)

    async def best(
        self,
        model: str,
        *,
        graph_id: str | None = None,
        hlo_fingerprint: str | None = None,
        target: str | None = None,
        compiler: str | None = None,
        min_writers: int | None = None,
        deadline: DeadlineArg = None,
    ) -> BestKnown | None:
        """The best decided config of a program on ``target`` (``GET /v1/best``), by
        ``graph_id`` or ``hlo_fingerprint``; None when nothing was decided.
        ``stale`` in the answer: decided under another ``compiler`` than this one."""
        flow = best_flow(
            model,
            target,
            compiler,
            graph_id=graph_id,
            hlo_fingerprint=hlo_fingerprint,
            min_writers=min_writers,
        )
        try:
            return await self._run(flow, self._deadline(deadline))
        except NoDecision:
            return None

    async def record_decision(
        self,
        model: str,
        decision: Decision,
        *,
        model_version: str | None = None,
        deadline: DeadlineArg = None,
    ) -> DecisionResult:
        """Store a tuning run's final choice (``POST /v1/decisions``; the writer
        token as for feedback). Resends of this call are stored once."""
        flow = decision_flow(model, model_version, decision)
        return await self._run(flow, self._deadline(deadline))

    async def models(self, *, deadline: DeadlineArg = None) -> list[ModelInfo]:
        return await self._run(models_flow(self.collections), self._deadline(deadline))

    async def ready(self) -> bool:
        try:
            return (await self._http.get("/readyz")).is_success
        except httpx.TransportError:
            return False

    def session(
        self,
        model: str,
        model_version: str | None = None,
        target: str | None = None,
        compiler: str | None = None,
    ) -> AsyncTuningSession:
        return AsyncTuningSession(self, model, model_version, target, compiler)

    async def _run(self, flow: Flow[T], deadline: Deadline) -> T:
        try:
            call = next(flow)
            while True:
                try:
                    response = await self._exchange(call, deadline)
                except CostModelError as exc:
                    call = flow.throw(exc)
                else:
                    call = flow.send(response)
        except StopIteration as stop:
            return cast(T, stop.value)

    async def _exchange(self, call: Call, deadline: Deadline) -> httpx.Response:
        attempt = 0
        while True:
            request = self._request(self._http, call, deadline)
            attempt += 1
            try:
                response = await self._http.send(request)
                error = self._failure(response, call)
            except httpx.TransportError as exc:
                error = self._transport_failure(exc, call)
            if error is None:
                return response
            await self._sleep(self.retry.next_delay(attempt, error, deadline))
