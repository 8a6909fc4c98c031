"""Each public operation as a sans-I/O flow, shared by the sync and async clients.

A flow is a generator that yields the ``Call`` it needs next and receives the
``httpx.Response``; a failed exchange is thrown into it as a ``CostModelError`` so
the flow can react (``GraphNotFound`` → upload the graph, then ask again, once).
The clients only drive flows: they own the I/O, the retries and the deadline, the
``KnownGraphs`` that decide whether a rank sends its graph by id or inline, and the
``ModelCollections`` that say, by model name, which collection's configs to build.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Generator, Iterable, Sequence
from typing import Any, TypeAlias, TypeVar

import httpx
import numpy as np
import numpy.typing as npt

from xla_costmodel.clients.errors import (
    GraphNotFound,
    InvalidRequest,
    ModelNotFound,
    ProtocolError,
)
from xla_costmodel.clients.feedback_options import FeedbackOptions
from xla_costmodel.clients.payloads import NPZ, PreparedGraph, config_array, configs_npz
from xla_costmodel.clients.rank_options import RankOptions
from xla_costmodel.clients.wire import (
    JSON,
    BestKnown,
    Call,
    Decision,
    DecisionResult,
    FeedbackResult,
    GraphInfo,
    ModelInfo,
    RankResult,
    json_body,
    parse_best,
    parse_decision,
    parse_feedback,
    parse_graph_info,
    parse_models,
    parse_rank,
    query,
)
from xla_costmodel.tpugraphs.collections import CollectionSpec, UnknownCollection, get

T = TypeVar("T")
Flow: TypeAlias = Generator[Call, httpx.Response, T]
# From this many configs on, the rank answer comes as npz: decoding it is cheaper
# than JSON from ~1,000 configs (10k: the request takes half the time); below, the
# npz codec costs more than it saves.
NPZ_ANSWER_MIN_CONFIGS = 1000
# Up to this many config values a rank by id goes as JSON: for a handful of configs
# the npz codec (the client's savez, the service's zip parsing) costs more than the
# text (costmodel bench: rank_1_config_ms).
JSON_BODY_MAX_VALUES = 64


class KnownGraphs:
    """(model, graph_id) pairs the service answered a rank or upload for, as seen
    by one client.

    A rank for a known id goes by id; any other carries its graph inline, one
    request instead of rank → ``graph_not_found`` → upload → rank. Bounded (the
    oldest are forgotten first) and safe to share between threads.
    """

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._ids: dict[tuple[str, str], None] = {}
        self._lock = threading.Lock()

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._ids

    def add(self, model: str, graph_id: str) -> None:
        with self._lock:
            self._ids.pop((model, graph_id), None)
            self._ids[(model, graph_id)] = None
            while len(self._ids) > self.limit:
                del self._ids[next(iter(self._ids))]

    def discard(self, model: str, graph_id: str) -> None:
        with self._lock:
            self._ids.pop((model, graph_id), None)


class ModelCollections:
    """Model name -> the collection ``GET /v1/models`` listed it with, as learnt by
    one client for its lifetime: one GET teaches every model it lists.

    A config's width does not say whose it is (two collections may share one), the
    model's name does. Forgotten when an answer suggests the model changed (unknown
    model or version, configs refused); the next call asks again. Safe to share
    between threads.
    """

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, model: str) -> str | None:
        return self._names.get(model)

    def learn(self, models: Iterable[ModelInfo]) -> None:
        with self._lock:
            self._names.update((m.name, m.collection) for m in models)

    def forget(self, model: str) -> None:
        with self._lock:
            self._names.pop(model, None)


def collection_flow(model: str, known: ModelCollections) -> Flow[CollectionSpec]:
    """The declared collection of ``model``: from ``known``, else ``GET /v1/models``."""
    name = known.get(model)
    if name is None:
        yield from models_flow(known)
        name = known.get(model)
    if name is None:
        raise ModelNotFound(
            f"no model {model!r} is loaded", code="model_not_found", field="model"
        )
    try:
        return get(name)
    except UnknownCollection:
        raise ProtocolError(
            f"model {model!r} is a {name!r} model, a collection this client does "
            "not know: a newer client is needed"
        ) from None


def upload_flow(
    model: str,
    graph: PreparedGraph,
    version: str | None,
    known: KnownGraphs | None = None,
) -> Flow[GraphInfo]:
    call = Call(
        "PUT",
        "/v1/graphs",
        query(model=model, model_version=version),
        graph.npz_bytes,
        NPZ,
    )
    info = parse_graph_info((yield call))
    if info.graph_id != graph.graph_id:
        raise ProtocolError(
            f"service hashed the graph to {info.graph_id}, the client to {graph.graph_id}: "
            "the canonical graph_id encodings differ"
        )
    if known is not None:
        known.add(model, graph.graph_id)
    return info


def rank_flow(
    model: str,
    graph: PreparedGraph,
    configs: npt.NDArray[np.float32],
    spec: CollectionSpec,
    options: RankOptions,
    known: KnownGraphs,
) -> Flow[RankResult]:
    """POST /v1/rank: by graph id once ``known`` has it, else with the graph inline.

    By id, ``graph_not_found`` (the service evicted it, or restarted) uploads the
    graph and retries once; inline, a body over the service's size limit falls back
    to the same upload and a rank by id. ``configs`` must already be validated
    (``payloads.config_array``) for a ``spec`` model.
    """
    if options.top_k is not None and options.top_k < 1:
        raise InvalidRequest("top_k must be >= 1", field="top_k")
    n = int(configs.shape[0])
    accept = NPZ if n >= NPZ_ANSWER_MIN_CONFIGS else None
    by_id = (model, graph.graph_id) in known
    first = _rank_call(model, graph, configs, spec, options, by_id, accept)
    uploaded = not by_id
    try:
        response = yield first
    except (GraphNotFound, InvalidRequest) as exc:
        if not _upload_helps(exc, by_id):
            raise
        known.discard(model, graph.graph_id)
        yield from upload_flow(model, graph, options.model_version)
        uploaded = True
        again = first
        if not by_id:
            again = _rank_call(model, graph, configs, spec, options, True, accept)
        response = yield again
    result = parse_rank(response, graph.graph_id, n, uploaded)
    known.add(model, graph.graph_id)
    return result


def _rank_call(
    model: str,
    graph: PreparedGraph,
    configs: npt.NDArray[np.float32],
    spec: CollectionSpec,
    opts: RankOptions,
    by_id: bool,
    accept: str | None,
) -> Call:
    # What a JSON body holds; an npz body carries the same in the query.
    given = {
        "model": model,
        "graph_id": graph.graph_id if by_id else None,
        "top_k": opts.top_k,
        "model_version": opts.model_version,
        "target": opts.target,
        "compiler": opts.compiler,
        "adapt": None if opts.adapt else False,
        "portfolio": True if opts.portfolio else None,
    }
    fields: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if by_id and configs.size <= JSON_BODY_MAX_VALUES:
        body = json_body({**fields, "configs": configs.tolist()})
        return Call("POST", "/v1/rank", {}, body, JSON, accept=accept)
    params = {
        k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in fields.items()
    }
    body = configs_npz(configs, graph, spec, inline=not by_id)
    return Call("POST", "/v1/rank", params, body, NPZ, accept=accept)


def _upload_helps(error: GraphNotFound | InvalidRequest, by_id: bool) -> bool:
    """By id: the service lost the graph. Inline: the graph made the body too large."""
    if by_id:
        return isinstance(error, GraphNotFound)
    return isinstance(error, InvalidRequest) and error.status == 413


def feedback_flow(
    model: str,
    graph: PreparedGraph,
    runtimes_ns: Sequence[int] | np.ndarray[Any, Any],
    options: FeedbackOptions,
    spec: CollectionSpec | None = None,
    known: KnownGraphs | None = None,
) -> Flow[FeedbackResult]:
    """POST /v1/feedback (JSON) with a fresh ``Idempotency-Key``: every resend of this
    call carries the same key, so the service stores it once however often it is
    resent (a lost answer, a 502, a timeout), and it is retried like a rank.
    ``options.configs`` are built for a ``spec`` model (``spec`` is needed with
    them); ``graph_not_found`` uploads the graph (``known`` learns it) and resends."""
    opts = options
    body: dict[str, Any] = {"model": model, "graph_id": graph.graph_id}
    body.update(
        _measurements(graph, runtimes_ns, opts.configs, opts.config_indices, spec)
    )
    given = {
        "model_version": opts.model_version,
        "target": opts.target,
        "ranking_id": opts.ranking_id,  # the rank answer config_indices index into
        "compiler": opts.compiler,  # what the runtimes were measured under
    }
    body.update((k, v) for k, v in given.items() if v is not None)
    call = Call(
        "POST",
        "/v1/feedback",
        {},
        json_body(body),
        JSON,
        idempotency_key=uuid.uuid4().hex,
    )
    try:
        response = yield call
    except GraphNotFound:  # unknown to the service, or missing from its database
        yield from upload_flow(model, graph, opts.model_version, known)
        response = yield call
    return parse_feedback(response)


def _measurements(
    graph: PreparedGraph,
    runtimes_ns: Sequence[int] | np.ndarray[Any, Any],
    configs: Any | None,
    config_indices: Sequence[int] | None,
    spec: CollectionSpec | None,
) -> dict[str, Any]:
    if (configs is None) == (config_indices is None):
        raise InvalidRequest(
            "give exactly one of configs or config_indices", field="configs"
        )
    runtimes = np.asarray(runtimes_ns)
    if runtimes.ndim != 1 or runtimes.size == 0 or runtimes.dtype.kind not in "iu":
        raise InvalidRequest(
            "runtimes_ns must be a non-empty list of integers", field="runtimes_ns"
        )
    if runtimes.min() <= 0:
        raise InvalidRequest("runtimes_ns must be > 0", field="runtimes_ns")
    out: dict[str, Any] = {"runtimes_ns": runtimes.astype(np.int64).tolist()}
    if configs is not None:
        if spec is None:
            raise ValueError("configs are built for a model's collection: give spec")
        rows = config_array(configs, graph, spec)
        out["configs"] = (rows.astype(np.int64) if _exact_ints(rows) else rows).tolist()
        count = rows.shape[0]
    else:
        out["config_indices"] = [int(i) for i in config_indices or ()]
        count = len(out["config_indices"])
    if count != runtimes.size:
        raise InvalidRequest(
            f"{count} configs but {runtimes.size} runtimes", field="runtimes_ns"
        )
    return out


def _exact_ints(rows: np.ndarray[Any, Any]) -> bool:
    """Whether ``astype(int64)`` loses nothing: finite, integral, below 2**53 (it
    would wrap 1e20 to -2**63)."""
    if rows.dtype.kind in "iub":
        return True
    return bool(
        np.isfinite(rows).all()
        and np.abs(rows).max(initial=0) < 2**53
        and np.array_equal(rows, np.round(rows))
    )


def best_flow(
    model: str,
    target: str | None,
    compiler: str | None,
    *,
    graph_id: str | None = None,
    hlo_fingerprint: str | None = None,
    min_writers: int | None = None,
) -> Flow[BestKnown]:
    """GET /v1/best for a program named by ``graph_id`` or ``hlo_fingerprint``;
    ``NoDecision`` when nothing was decided."""
    if (graph_id is None) == (hlo_fingerprint is None):
        raise InvalidRequest(
            "give exactly one of graph_id and hlo_fingerprint", field="graph_id"
        )
    params = query(
        model=model,
        target=target,
        compiler=compiler,
        graph_id=graph_id,
        hlo_fingerprint=hlo_fingerprint,
        min_writers=min_writers,
    )
    return parse_best((yield Call("GET", "/v1/best", params)))


def decision_flow(
    model: str, version: str | None, decision: Decision
) -> Flow[DecisionResult]:
    """POST /v1/decisions with a fresh ``Idempotency-Key`` kept across resends."""
    call = Call(
        "POST",
        "/v1/decisions",
        {},
        json_body(decision.to_json(model, version)),
        JSON,
        idempotency_key=uuid.uuid4().hex,
    )
    return parse_decision((yield call))


def models_flow(known: ModelCollections | None = None) -> Flow[list[ModelInfo]]:
    """GET /v1/models; what it lists teaches ``known`` each model's collection."""
    models = parse_models((yield Call("GET", "/v1/models")))
    if known is not None:
        known.learn(models)
    return models
