"""``CostModelClient``: the blocking client (see ``clients.exchange`` for the policy)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
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
from xla_costmodel.clients.session import TuningSession
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


class CostModelClient(ClientCore):
    """Blocking client. Use as a context manager, or call ``close()``."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        limits: httpx.Limits = DEFAULT_LIMITS,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
        default_deadline: float | None = None,
        token: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(timeout, limits, retry, default_deadline, token)
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=base_url,
            timeout=self.timeout,
            headers=self._headers(headers),
            transport=transport or httpx.HTTPTransport(limits=limits, retries=0),
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    @property
    def base_url(self) -> str:
        """The service's URL, as httpx normalised ``base_url`` (a path ends in "/")."""
        return str(self._http.base_url)

    def rank(
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
        """Rank ``configs`` for ``graph``, best first.

        ``graph`` may be HLO text (``Hlo``, or a ``.hlo.txt`` path) and ``configs`` raw
        configs (``TileSizes``; instruction name -> ``NodeLayout``): both are turned
        into arrays here, so only arrays travel and the graph_id is the service's.
        The graph travels inline with the first rank of its id in this client (one
        request, ``uploaded`` is True); later ranks send only the id, and upload the
        graph again only if the service answers ``graph_not_found``. With
        ``fallback`` (the caller's own order, best first; unlisted configs follow in
        input order), a service that cannot answer within ``deadline`` seconds yields
        a ``degraded`` result instead of ``ServiceUnavailable``/``DeadlineExceeded``.
        To name the compiler the configs will run under (the service weighs other
        compilers' measurements down), rank through a ``session(compiler=...)`` or
        ``rank_with(..., RankOptions(compiler=...))``.
        """
        options = RankOptions(
            top_k=top_k,
            deadline=deadline,
            fallback=fallback,
            model_version=model_version,
            target=target,
            adapt=adapt,
            portfolio=portfolio,
        )
        return self.rank_with(model, graph, configs, options)

    def rank_with(
        self, model: str, graph: GraphInput, configs: Any, options: RankOptions
    ) -> RankResult:
        """``rank`` with its keywords as one ``RankOptions`` (what sessions send)."""
        limit = self._deadline(options.deadline)  # client-side preparation counts too
        with self._forgetting(model):
            try:
                spec = self._run(collection_flow(model, self.collections), limit)
            except ServiceUnavailable as exc:
                return unlearned_fallback(exc, options, graph, configs, model)
            prepared, n, flow = self._prepare_rank(spec, model, graph, configs, options)
            try:
                return self._run(flow, limit)
            except ServiceUnavailable as exc:
                return fallback_or_raise(exc, options, prepared, n, model)

    def upload_graph(
        self,
        model: str,
        graph: GraphInput,
        *,
        model_version: str | None = None,
        deadline: DeadlineArg = None,
    ) -> GraphInfo:
        """PUT the graph (``rank`` does this by itself when needed)."""
        limit = self._deadline(deadline)
        return self._run(
            upload_flow(model, prepare_graph(graph), model_version, self.known_graphs),
            limit,
        )

    def feedback(
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
        """Report measured runtimes, for config rows, or for indices into the rank
        answer ``ranking_id`` names (``RankResult.ranking_id``).

        Sends the client's writer token (``token=``, else ``COSTMODEL_TOKEN``).
        Raises ``EndpointNotFound`` if the service has no ``/v1/feedback`` route.
        """
        options = FeedbackOptions(
            configs=configs,
            config_indices=config_indices,
            ranking_id=ranking_id,
            model_version=model_version,
            target=target,
            compiler=compiler,
            deadline=deadline,
        )
        return self.feedback_with(model, graph, runtimes_ns, options)

    def feedback_with(
        self,
        model: str,
        graph: GraphInput,
        runtimes_ns: Sequence[int] | np.ndarray[Any, Any],
        options: FeedbackOptions,
    ) -> FeedbackResult:
        """``feedback`` with its keywords as one ``FeedbackOptions`` (what sessions
        send)."""
        limit = self._deadline(options.deadline)
        with self._forgetting(model):
            spec = None  # configs are built for the model's collection
            if options.configs is not None:
                spec = self._run(collection_flow(model, self.collections), limit)
            prepared = prepare_graph(graph, options.configs, spec)
            flow = feedback_flow(
                model, prepared, runtimes_ns, options, spec, self.known_graphs
            )
            return self._run(flow, limit)

    def best(
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
            return self._run(flow, self._deadline(deadline))
        except NoDecision:
            return None

    def record_decision(
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
        return self._run(flow, self._deadline(deadline))

    def models(self, *, deadline: DeadlineArg = None) -> list[ModelInfo]:
        return self._run(models_flow(self.collections), self._deadline(deadline))

    def ready(self) -> bool:
        """One unretried ``GET /readyz``: True on 2xx, False on anything else."""
        try:
            return self._http.get("/readyz").is_success
        except httpx.TransportError:
            return False

    def session(
        self,
        model: str,
        model_version: str | None = None,
        target: str | None = None,
        compiler: str | None = None,
    ) -> TuningSession:
        """A tuning session that pins the model version of its first answer (and
        ranks and reports for ``target``, default the model's, and under
        ``compiler``: its ranks weigh other compilers' measurements down, its
        reports say what the runtimes were measured under)."""
        return TuningSession(self, model, model_version, target, compiler)

    def _run(self, flow: Flow[T], deadline: Deadline) -> T:
        try:
            call = next(flow)
            while True:
                try:
                    response = self._exchange(call, deadline)
                except CostModelError as exc:
                    call = flow.throw(exc)
                else:
                    call = flow.send(response)
        except StopIteration as stop:
            return cast(T, stop.value)

    def _exchange(self, call: Call, deadline: Deadline) -> httpx.Response:
        attempt = 0
        while True:
            request = self._request(self._http, call, deadline)
            attempt += 1
            try:
                response = self._http.send(request)
                error = self._failure(response, call)
            except httpx.TransportError as exc:
                error = self._transport_failure(exc, call)
            if error is None:
                return response
            self._sleep(self.retry.next_delay(attempt, error, deadline))
