"""The HTTP contract, without I/O: one ``Call`` per request, typed results per answer.

Every parser checks the answer against the contract and raises ``ProtocolError``
on anything else, so a result object is always complete and typed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from clients.errors import CostModelError, ProtocolError
from clients.payloads import NPZ

JSON = "application/json"
CacheTier = Literal["memory", "redis", "miss"]


@dataclass(frozen=True)
class Call:
    """One HTTP request. ``idempotent``: repeating it cannot change the outcome."""

    method: str
    path: str
    params: Mapping[str, str] = field(default_factory=dict)
    content: bytes | None = None
    content_type: str | None = None
    idempotent: bool = True

    @property
    def headers(self) -> dict[str, str]:
        return {"Content-Type": self.content_type} if self.content_type else {}


def query(**values: str | int | None) -> dict[str, str]:
    return {k: str(v) for k, v in values.items() if v is not None}


def json_body(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@dataclass(frozen=True)
class RankResult:
    """Configs ranked best first. ``scores`` are in input order, lower = faster.

    ``degraded`` results come from the caller's ``fallback`` ordering: the service
    did not answer (``error`` says why), so there are no scores, version or cache.
    """

    ranking: tuple[int, ...]
    top_k: tuple[int, ...]
    scores: tuple[float, ...] | None
    model: str
    model_version: str | None
    graph_id: str
    cache: CacheTier | None
    uploaded: bool = False
    degraded: bool = False
    error: CostModelError | None = field(default=None, compare=False)


@dataclass(frozen=True)
class GraphInfo:
    graph_id: str
    nodes: int
    edges: int
    configurable_nodes: int
    cached: bool


@dataclass(frozen=True)
class FeedbackResult:
    stored: int
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelInfo:
    name: str
    collection: str
    version: str
    inputs: Any = None


def _json_object(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        raise ProtocolError(
            f"{response.request.url.path}: answer is not JSON",
            status=response.status_code,
        ) from None
    if not isinstance(body, dict):
        raise ProtocolError(f"{response.request.url.path}: answer is not a JSON object")
    return body


def _ints(body: Mapping[str, Any], key: str) -> tuple[int, ...]:
    value = body.get(key)
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ProtocolError(f"rank answer: {key!r} must be a list of integers")
    return tuple(value)


def parse_rank(
    response: httpx.Response, graph_id: str, num_configs: int, uploaded: bool
) -> RankResult:
    body = _json_object(response)
    ranking = _ints(body, "ranking")
    top_k = _ints(body, "top_k") if "top_k" in body else ranking
    scores = body.get("scores")
    if sorted(ranking) != list(range(num_configs)):
        raise ProtocolError(
            f"rank answer: ranking is not a permutation of {num_configs}"
        )
    if not isinstance(scores, list) or len(scores) != num_configs:
        raise ProtocolError("rank answer: 'scores' must have one entry per config")
    if body.get("graph_id") not in (None, graph_id):
        raise ProtocolError(
            f"rank answer is for graph {body.get('graph_id')}, not {graph_id}"
        )
    cache = body.get("cache")
    if cache not in ("memory", "redis", "miss"):
        raise ProtocolError(f"rank answer: unknown cache tier {cache!r}")
    version = body.get("model_version")
    return RankResult(
        ranking=ranking,
        top_k=top_k,
        scores=tuple(float(s) for s in scores),
        model=str(body.get("model", "")),
        model_version=None if version is None else str(version),
        graph_id=graph_id,
        cache=cache,
        uploaded=uploaded,
    )


def fallback_result(
    order: Sequence[int],
    num_configs: int,
    top_k: int | None,
    model: str,
    graph_id: str,
    error: CostModelError,
) -> RankResult:
    """The caller's ordering, completed with the unlisted configs in input order."""
    listed = list(dict.fromkeys(int(i) for i in order))
    if any(not 0 <= i < num_configs for i in listed):
        raise ValueError(f"fallback indices must be in [0, {num_configs - 1}]")
    seen = set(listed)
    ranking = tuple(listed + [i for i in range(num_configs) if i not in seen])
    k = num_configs if top_k is None else top_k
    return RankResult(
        ranking=ranking,
        top_k=ranking[:k],
        scores=None,
        model=model,
        model_version=None,
        graph_id=graph_id,
        cache=None,
        degraded=True,
        error=error,
    )


def parse_graph_info(response: httpx.Response) -> GraphInfo:
    body = _json_object(response)
    try:
        return GraphInfo(
            graph_id=str(body["graph_id"]),
            nodes=int(body["nodes"]),
            edges=int(body["edges"]),
            configurable_nodes=int(body.get("configurable_nodes") or 0),
            cached=bool(body.get("cached", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(
            f"graph upload answer: bad or missing field {exc}"
        ) from None


def parse_feedback(response: httpx.Response) -> FeedbackResult:
    body = _json_object(response)
    stored = body.get("stored")
    if not isinstance(stored, int):
        raise ProtocolError("feedback answer: 'stored' must be an integer")
    return FeedbackResult(stored, {k: v for k, v in body.items() if k != "stored"})


def parse_models(response: httpx.Response) -> list[ModelInfo]:
    try:
        body: Any = response.json()
    except ValueError:
        raise ProtocolError("models answer is not JSON") from None
    items = body.get("models") if isinstance(body, dict) else body
    if not isinstance(items, list):
        raise ProtocolError("models answer: expected a list of models")
    try:
        return [
            ModelInfo(
                str(m["name"]), str(m["collection"]), str(m["version"]), m.get("inputs")
            )
            for m in items
        ]
    except (KeyError, TypeError) as exc:
        raise ProtocolError(f"models answer: bad or missing field {exc}") from None


__all__ = [
    "JSON",
    "NPZ",
    "Call",
    "FeedbackResult",
    "GraphInfo",
    "ModelInfo",
    "RankResult",
]
