"""Each public operation as a sans-I/O flow, shared by the sync and async clients.

A flow is a generator that yields the ``Call`` it needs next and receives the
``httpx.Response``; a failed exchange is thrown into it as a ``CostModelError`` so
the flow can react (``GraphNotFound`` → upload the graph, then ask again, once).
The clients only drive flows: they own the I/O, the retries and the deadline.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, TypeAlias, TypeVar

import httpx
import numpy as np
import numpy.typing as npt

from clients.errors import GraphNotFound, InvalidRequest, ProtocolError
from clients.payloads import NPZ, PreparedGraph, config_array, configs_npz
from clients.wire import (
    JSON,
    Call,
    FeedbackResult,
    GraphInfo,
    ModelInfo,
    RankResult,
    json_body,
    parse_feedback,
    parse_graph_info,
    parse_models,
    parse_rank,
    query,
)

T = TypeVar("T")
Flow: TypeAlias = Generator[Call, httpx.Response, T]


def upload_flow(
    model: str, graph: PreparedGraph, version: str | None
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
    return info


def rank_flow(
    model: str,
    graph: PreparedGraph,
    configs: npt.NDArray[np.float32],
    top_k: int | None,
    version: str | None,
) -> Flow[RankResult]:
    """POST /v1/rank by graph id; on ``graph_not_found`` upload and retry once.

    ``configs`` must already be validated (``payloads.config_array``).
    """
    if top_k is not None and top_k < 1:
        raise InvalidRequest("top_k must be >= 1", field="top_k")
    params = query(
        model=model, graph_id=graph.graph_id, top_k=top_k, model_version=version
    )
    call = Call("POST", "/v1/rank", params, configs_npz(configs, graph), NPZ)
    uploaded = False
    try:
        response = yield call
    except GraphNotFound:
        yield from upload_flow(model, graph, version)
        uploaded = True
        response = yield call
    return parse_rank(response, graph.graph_id, configs.shape[0], uploaded)


def feedback_flow(
    model: str,
    graph: PreparedGraph,
    runtimes_ns: Sequence[int] | np.ndarray[Any, Any],
    configs: Any | None,
    config_indices: Sequence[int] | None,
    version: str | None,
) -> Flow[FeedbackResult]:
    """POST /v1/feedback (JSON). Not idempotent: a lost answer is not resent."""
    body = {"model": model, "graph_id": graph.graph_id}
    body.update(_measurements(graph, runtimes_ns, configs, config_indices))
    if version is not None:
        body["model_version"] = version
    call = Call("POST", "/v1/feedback", {}, json_body(body), JSON, idempotent=False)
    try:
        response = yield call
    except GraphNotFound:
        yield from upload_flow(model, graph, version)
        response = yield call
    return parse_feedback(response)


def _measurements(
    graph: PreparedGraph,
    runtimes_ns: Sequence[int] | np.ndarray[Any, Any],
    configs: Any | None,
    config_indices: Sequence[int] | None,
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
        rows = config_array(configs, graph)
        integral = np.array_equal(rows, np.round(rows))
        out["configs"] = (rows.astype(np.int64) if integral else rows).tolist()
        count = rows.shape[0]
    else:
        out["config_indices"] = [int(i) for i in config_indices or ()]
        count = len(out["config_indices"])
    if count != runtimes.size:
        raise InvalidRequest(
            f"{count} configs but {runtimes.size} runtimes", field="runtimes_ns"
        )
    return out


def models_flow() -> Flow[list[ModelInfo]]:
    return parse_models((yield Call("GET", "/v1/models")))
