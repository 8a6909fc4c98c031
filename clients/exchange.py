"""What the sync and async clients share: configuration and the I/O-free halves of
one HTTP exchange (building the request under the deadline, judging the answer).

Both clients hold one ``httpx.Client``/``AsyncClient`` with explicit ``Timeout`` and
``Limits``. The limits go into a transport the client builds itself, because httpx
ignores ``limits=`` once a transport is given; ``transport=`` replaces it in tests.
Each exchange is retried by ``RetryPolicy`` on connection failures, 429 and 502-504
(a non-idempotent one only when it never left, or on 429/503), honouring
``Retry-After``; every wait and every timeout phase is cut to the caller's
deadline. The operations live in ``clients.operations``, shared by both clients.

A model's collection (what its configs are) is learnt by name from
``GET /v1/models`` once per client (``ModelCollections``), and forgotten when an
answer suggests the model changed: unknown model or version, or configs refused.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx

from xla_costmodel.clients.errors import (
    CostModelError,
    InvalidRequest,
    ModelNotFound,
    ServiceUnavailable,
    VersionNotLoaded,
    error_from_response,
    error_from_transport,
)
from xla_costmodel.clients.operations import (
    Flow,
    KnownGraphs,
    ModelCollections,
    rank_flow,
)
from xla_costmodel.clients.payloads import (
    GraphInput,
    PreparedGraph,
    config_array,
    config_count,
    prepare_graph,
)
from xla_costmodel.clients.rank_options import RankOptions
from xla_costmodel.clients.retry import Deadline, RetryPolicy, parse_retry_after
from xla_costmodel.clients.wire import Call, RankResult, fallback_result
from xla_costmodel.tpugraphs.collections import CollectionSpec

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = httpx.Timeout(connect=2.0, read=10.0, write=10.0, pool=2.0)
DEFAULT_LIMITS = httpx.Limits(
    max_connections=16, max_keepalive_connections=8, keepalive_expiry=30.0
)
USER_AGENT = "costmodel-client/0.1"
TOKEN_ENV = "COSTMODEL_TOKEN"  # a writer's token, when none is passed
DeadlineArg = float | Deadline | None
URL_CACHE_ENTRIES = 256  # absolute URLs kept per client (``ClientCore._url``)


class ClientCore:
    """What both clients share: configuration and the I/O-free halves of an exchange."""

    def __init__(
        self,
        timeout: httpx.Timeout | float,
        limits: httpx.Limits,
        retry: RetryPolicy | None,
        default_deadline: float | None,
        token: str | None = None,
    ) -> None:
        self.timeout = (
            timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        )
        self.limits = limits
        self.retry = retry or RetryPolicy()
        self.default_deadline = default_deadline
        # Graph ids the service answered for: ranked by id, the others sent inline.
        self.known_graphs = KnownGraphs()
        # Model name -> its collection, from GET /v1/models: which configs to build.
        self.collections = ModelCollections()
        # The writer token feedback needs (docs/security.md); "" means none at all.
        self.token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        # (path, query) -> absolute URL (``_url``).
        self._urls: dict[tuple[str, tuple[tuple[str, str], ...]], httpx.URL] = {}

    def _headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        base = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if self.token:
            base["Authorization"] = f"Bearer {self.token}"
        return {**base, **(extra or {})}

    def _deadline(self, value: DeadlineArg) -> Deadline:
        return Deadline.coerce(value, self.default_deadline)

    def _request(
        self, http: httpx.Client | httpx.AsyncClient, call: Call, deadline: Deadline
    ) -> httpx.Request:
        if deadline.expired():
            raise deadline.exceeded(f"before {call.method} {call.path}")
        return http.build_request(
            call.method,
            self._url(http, call),
            content=call.content,
            headers=call.headers,
            timeout=deadline.clamp(self.timeout),
        )

    def _url(self, http: httpx.Client | httpx.AsyncClient, call: Call) -> httpx.URL:
        """The absolute URL of ``call``, built once per (path, query): httpx parses a
        relative path, the merged URL and the query again on every request (3 of
        them, a third of the client's own time on a 1-config rank), but takes an
        absolute ``URL`` as it is. The same URL httpx would build: the path under
        ``base_url``, the query replaced by ``params``."""
        key = (call.path, tuple(call.params.items()))
        url = self._urls.get(key)
        if url is None:
            if len(self._urls) >= URL_CACHE_ENTRIES:  # graph ids come and go
                self._urls.clear()
            base = http.base_url
            path = base.raw_path + httpx.URL(call.path).raw_path.lstrip(b"/")
            url = httpx.URL(base.copy_with(raw_path=path), params=call.params)
            self._urls[key] = url
        return url

    @staticmethod
    def _failure(response: httpx.Response, call: Call) -> CostModelError | None:
        if response.is_success:
            return None
        retry_after = parse_retry_after(response.headers.get("Retry-After"))
        return error_from_response(response, retry_after, call.idempotent)

    @staticmethod
    def _transport_failure(exc: httpx.TransportError, call: Call) -> CostModelError:
        error = error_from_transport(exc, call.idempotent)
        error.__cause__ = exc
        return error

    @contextmanager
    def _forgetting(self, model: str) -> Iterator[None]:
        """Forget ``model``'s collection when the call fails in a way a changed model
        explains (it is gone, its version is, its configs no longer fit)."""
        try:
            yield
        except (ModelNotFound, VersionNotLoaded, InvalidRequest):
            self.collections.forget(model)
            raise

    def _prepare_rank(
        self,
        spec: CollectionSpec,
        model: str,
        graph: GraphInput,
        configs: Any,
        options: RankOptions,
    ) -> tuple[PreparedGraph, int, Flow[RankResult]]:
        prepared = prepare_graph(graph, configs, spec)
        array = config_array(configs, prepared, spec)
        flow = rank_flow(model, prepared, array, spec, options, self.known_graphs)
        return prepared, int(array.shape[0]), flow


def fallback_or_raise(
    error: ServiceUnavailable,
    options: RankOptions,
    prepared: PreparedGraph,
    num_configs: int,
    model: str,
) -> RankResult:
    if options.fallback is None:
        raise error
    return fallback_result(
        options.fallback, num_configs, options.top_k, model, prepared.graph_id, error
    )


def unlearned_fallback(
    error: ServiceUnavailable,
    options: RankOptions,
    graph: GraphInput,
    configs: Any,
    model: str,
) -> RankResult:
    """``fallback_or_raise`` when the service could not say the model's collection:
    the graph is identified without it (HLO text by the form of the configs)."""
    if options.fallback is None:
        raise error
    prepared = prepare_graph(graph, configs)
    return fallback_or_raise(error, options, prepared, config_count(configs), model)
