"""A rank answer: ``RankResult``, the parser that checks either encoding (JSON, or
an npz with the other fields in headers) against the contract, and the degraded
result built from the caller's own ordering when the service did not answer.

The checks are numpy passes, not a Python loop per element; anything off the
contract raises ``ProtocolError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

import httpx
import numpy as np
import numpy.typing as npt

from xla_costmodel.clients.errors import CostModelError, ProtocolError, json_object
from xla_costmodel.clients.payloads import NPZ
from xla_costmodel.tpugraphs.blend import Shaping
from xla_costmodel.tpugraphs.npz import NpzError, read_npz

# A rank answer for 100k configs is ~2 MB; this leaves room for far larger batches.
MAX_ANSWER_BYTES = 1 << 30
CacheTier = Literal["memory", "redis", "miss"]


@dataclass(frozen=True)
class RankResult:
    """Configs ranked best first. ``scores`` are in input order, lower = faster.

    ``cache`` is where the service found the graph's embedding for this request
    (``"miss"``: it encoded the graph it received with the request). ``uploaded``:
    the graph's arrays went to the service during this call, inline with the rank
    (the first for its id in this client) or by ``PUT /v1/graphs`` after
    ``graph_not_found``.

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
    adapted: int = 0  # measurements of this graph that shaped the scores (0: prior)
    ranking_id: str | None = None  # for feedback by config_indices (None: degraded)
    # With portfolio=True: every index in the service's exploration order.
    portfolio: tuple[int, ...] | None = None
    # What shaped the scores besides ``adapted``: the target's knowledge (programs,
    # measurements, its share of the prior) and the model's own weight. With
    # ``adapted``, the fields of the service's ``Shaping`` (``tpugraphs.blend``).
    target_programs: int = 0
    target_measurements: int = 0
    knowledge_weight: float = 0.0
    prior_weight: float = 1.0


def parse_rank(
    response: httpx.Response, graph_id: str, num_configs: int, uploaded: bool
) -> RankResult:
    """A rank answer, JSON or (when it says so) npz, checked against the contract.

    The checks are numpy passes, not a Python loop per element: a 10k-config answer
    is parsed in about the time ``tuple`` takes to build the result.
    """
    content_type = response.headers.get("content-type", "")
    if content_type.split(";", 1)[0].strip().lower() == NPZ:
        answer = _npz_answer(response)
    else:
        answer = _json_answer(response)
    ranking = answer.ranking
    if len(ranking) != num_configs or not _is_permutation(ranking):
        raise ProtocolError(
            f"rank answer: ranking is not a permutation of {num_configs}"
        )
    if len(answer.scores) != num_configs:
        raise ProtocolError("rank answer: 'scores' must have one entry per config")
    if answer.graph_id not in (None, graph_id):
        raise ProtocolError(
            f"rank answer is for graph {answer.graph_id}, not {graph_id}"
        )
    if answer.cache not in ("memory", "redis", "miss"):
        raise ProtocolError(f"rank answer: unknown cache tier {answer.cache!r}")
    listed = tuple(ranking.tolist())
    top = answer.top_k
    k = len(top)
    if k <= num_configs and np.array_equal(top, ranking[:k]):
        top_k = listed[:k]  # as the service sends it: no second 10k-int tuple
    else:
        top_k = tuple(top.tolist())
    return RankResult(
        ranking=listed,
        top_k=top_k,
        scores=tuple(answer.scores.tolist()),
        model=answer.model,
        model_version=answer.model_version,
        graph_id=graph_id,
        cache=answer.cache,
        uploaded=uploaded,
        ranking_id=_ranking_id(answer.ranking_id),
        portfolio=_portfolio(answer.portfolio, num_configs),
        **asdict(_shaping(answer.shaping)),
    )


def _shaping(found: Mapping[str, Any]) -> Shaping:
    """What shaped the scores, each field checked; a field the answer lacks (a
    service that predates it) is the prior alone's."""
    return Shaping(
        adapted=_adapted(found.get("adapted")),
        target_programs=_count(found.get("target_programs"), "target_programs"),
        target_measurements=_count(
            found.get("target_measurements"), "target_measurements"
        ),
        knowledge_weight=_share(found.get("knowledge_weight"), 0.0),
        prior_weight=_share(found.get("prior_weight"), 1.0),
    )


def _portfolio(value: Any, num_configs: int) -> tuple[int, ...] | None:
    if value is None:
        return None
    order = np.asarray(value)
    if order.ndim != 1 or order.dtype.kind not in "iu" or len(order) != num_configs:
        raise ProtocolError("rank answer: 'portfolio' must list every config index")
    if not _is_permutation(order.astype(np.int64)):
        raise ProtocolError("rank answer: 'portfolio' is not a permutation")
    return tuple(order.tolist())


def _count(value: Any, name: str) -> int:
    """0 from a service that predates target knowledge (no such field)."""
    try:
        n = int(value or 0)
    except (TypeError, ValueError):
        raise ProtocolError(f"rank answer: {name} must be an integer") from None
    if n < 0:
        raise ProtocolError(f"rank answer: {name} must be >= 0")
    return n


def _share(value: Any, missing: float) -> float:
    if value is None:
        return missing
    try:
        share = float(value)
    except (TypeError, ValueError):
        raise ProtocolError(f"rank answer: bad weight {value!r}") from None
    if not 0.0 <= share <= 1.0:
        raise ProtocolError(f"rank answer: weight {share} is not in [0, 1]")
    return share


def _ranking_id(value: Any) -> str | None:
    """None from a service that predates ranking ids."""
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= 128:
        raise ProtocolError(f"rank answer: bad ranking_id {value!r}")
    return value


def _adapted(value: Any) -> int:
    """0 from a service that predates adaptation (no such field)."""
    try:
        adapted = int(value or 0)
    except (TypeError, ValueError):
        raise ProtocolError(
            f"rank answer: adapted must be an integer, got {value!r}"
        ) from None
    if adapted < 0:
        raise ProtocolError(f"rank answer: adapted must be >= 0, got {adapted}")
    return adapted


@dataclass(frozen=True)
class _RankAnswer:
    """A rank answer's fields, from either encoding, before the shared checks."""

    model: str
    model_version: str | None
    graph_id: Any
    cache: Any
    ranking: npt.NDArray[np.int64]
    scores: npt.NDArray[np.floating[Any]]
    top_k: npt.NDArray[np.int64]
    ranking_id: Any = None
    portfolio: Any = None
    shaping: Mapping[str, Any] = field(default_factory=dict)  # ``Shaping``'s fields


# The answer's JSON keys, and (``X-`` and dashes) npz headers, of what shaped it.
SHAPING = tuple(f.name for f in fields(Shaping))


def _is_permutation(ranking: npt.NDArray[np.int64]) -> bool:
    """Each of 0..n-1 exactly once."""
    n = len(ranking)
    if n == 0:
        return True
    if ranking.min() < 0 or ranking.max() >= n:
        return False
    return bool(np.bincount(ranking, minlength=n).max() == 1)


def _json_answer(response: httpx.Response) -> _RankAnswer:
    body = json_object(response)
    ranking = _int_array(body, "ranking")
    top_k = _int_array(body, "top_k") if "top_k" in body else ranking
    try:
        scores = np.array(body.get("scores"))
    except (TypeError, ValueError):  # ragged
        scores = np.array(None)
    if scores.ndim != 1 or scores.dtype.kind not in "biuf":
        raise ProtocolError("rank answer: 'scores' must be a list of numbers")
    version = body.get("model_version")
    return _RankAnswer(
        model=str(body.get("model", "")),
        model_version=None if version is None else str(version),
        graph_id=body.get("graph_id"),
        cache=body.get("cache"),
        ranking=ranking,
        scores=scores.astype(np.float64, copy=False),
        top_k=top_k,
        ranking_id=body.get("ranking_id"),
        portfolio=body.get("portfolio"),
        shaping={k: body[k] for k in SHAPING if k in body},
    )


def _int_array(body: Mapping[str, Any], key: str) -> npt.NDArray[np.int64]:
    """A JSON list of integers (bools are not) as int64: one C-level type scan."""
    value = body.get(key)
    if not isinstance(value, list) or not set(map(type, value)) <= {int}:
        raise ProtocolError(f"rank answer: {key!r} must be a list of integers")
    try:
        return np.array(value, dtype=np.int64)
    except OverflowError:
        raise ProtocolError(
            f"rank answer: {key!r} must be a list of integers"
        ) from None


def _npz_answer(response: httpx.Response) -> _RankAnswer:
    """``Accept: application/x-npz``: the arrays in an npz, the rest in headers."""
    try:
        found = read_npz(response.content, MAX_ANSWER_BYTES)
        arrays = {key: found[key] for key in ("ranking", "scores", "top_k")}
    except (NpzError, KeyError) as exc:
        raise ProtocolError(
            f"rank answer: not an npz of ranking, scores and top_k ({exc})"
        ) from None
    for key, kinds in (("ranking", "iu"), ("top_k", "iu"), ("scores", "f")):
        if arrays[key].ndim != 1 or arrays[key].dtype.kind not in kinds:
            raise ProtocolError(f"rank answer: {key!r} must be a 1-d numeric array")
    headers = response.headers
    return _RankAnswer(
        model=headers.get("x-model", ""),
        model_version=headers.get("x-model-version"),
        graph_id=headers.get("x-graph-id"),
        cache=headers.get("x-cache"),
        ranking=arrays["ranking"].astype(np.int64, copy=False),
        scores=arrays["scores"],
        top_k=arrays["top_k"].astype(np.int64, copy=False),
        ranking_id=headers.get("x-ranking-id"),
        portfolio=found.get("portfolio"),
        shaping={
            k: headers[h]
            for k in SHAPING
            if (h := "x-" + k.replace("_", "-")) in headers
        },
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
