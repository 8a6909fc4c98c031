"""Rank configs for a graph (by graph_id, or sent inline)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pydantic_core
from fastapi import APIRouter, Request, Response

from xla_costmodel.service.body import parse, parse_query, read_body
from xla_costmodel.service.codecs import (
    Params,
    decode_rank,
    encode_rank_npz,
    prefers_npz,
)
from xla_costmodel.service.core.ranker import RankResult
from xla_costmodel.service.deps import ClientDep, RankerDep, SettingsDep
from xla_costmodel.service.schemas import (
    NPZ_MEDIA_TYPE,
    RANK_NPZ_HEADERS,
    RankIn,
    RankOut,
    RankQuery,
    binary_body,
    error_responses,
    query_parameters,
)
from xla_costmodel.tpugraphs.blend import Shaping

router = APIRouter(prefix="/v1", tags=["ranking"])

_NPZ_ANSWER: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {NPZ_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}},
        "description": "JSON, or with Accept: application/x-npz an npz of ranking, "
        "scores, top_k (and portfolio, when asked) and X-Model/X-Model-Version/X-Cache/"
        "X-Graph-ID/X-Adapted/X-Ranking-ID/X-Target-Programs/X-Target-Measurements/"
        "X-Knowledge-Weight/X-Prior-Weight headers",
        "headers": RANK_NPZ_HEADERS,
    }
}


@router.post(
    "/rank",
    response_model=RankOut,
    responses={
        **_NPZ_ANSWER,
        **error_responses(400, 404, 408, 409, 413, 415, 422, 503),
    },
    openapi_extra={**binary_body(RankIn), "parameters": query_parameters(RankQuery)},
)
async def rank(
    request: Request, ranker: RankerDep, settings: SettingsDep, client: ClientDep
) -> Response:
    """Score configs (JSON or npz body); ``ranking`` lists all indices, best first."""
    q = parse_query(RankQuery, request.query_params)
    body = await read_body(request, settings.requests.max_body_bytes)
    params = Params(
        model=q.model,
        model_version=q.model_version,
        graph_id=q.graph_id,
        top_k=q.top_k,
        target=q.target,
        adapt=q.adapt,
        portfolio=q.portfolio,
        compiler=q.compiler,
    )
    content_type = request.headers.get("content-type")
    req = await parse(
        decode_rank,
        body,
        content_type,
        params,
        settings.limits.max_decoded_bytes,
        client,
    )
    request.state.model = req.model
    result = await ranker.rank(req)
    if prefers_npz(request.headers.get("accept")):
        return _npz_answer(result)
    return _json_answer(result)


def _json_answer(r: RankResult) -> Response:
    """``RankOut`` as JSON, serialized straight from the core's result. Validating
    the 3 lists of up to 100k numbers that the core built (``RankOut(...)``, then
    FastAPI's response model) cost more than encoding them: 10k configs 2.6 -> 1.7
    ms. ``test_json_answer_is_the_schema_serialized`` keeps the two in step."""
    ranking = r.ranking.tolist()
    top_k = ranking if len(r.top_k) == len(ranking) else ranking[: len(r.top_k)]
    shaping = _shaping(r.shaping)
    answer = {
        "model": r.model,
        "model_version": r.model_version,
        "graph_id": r.graph_id,
        "cache": r.cache,
        "adapted": shaping.pop("adapted"),  # the schema's field order
        "ranking_id": r.ranking_id,
        "ranking": ranking,
        "scores": r.scores.tolist(),
        "top_k": top_k,
        **shaping,
        "portfolio": None if r.portfolio is None else r.portfolio.tolist(),
    }
    return Response(pydantic_core.to_json(answer), media_type="application/json")


def _npz_answer(r: RankResult) -> Response:
    headers = {
        "X-Model": r.model,
        "X-Model-Version": r.model_version,
        "X-Cache": r.cache,
        "X-Graph-ID": r.graph_id,
        "X-Ranking-ID": r.ranking_id,
        **{
            f"X-{k.replace('_', '-').title()}": str(v)
            for k, v in _shaping(r.shaping).items()
        },
    }
    content = encode_rank_npz(r.ranking, r.scores, r.top_k, r.portfolio)
    return Response(content, media_type=NPZ_MEDIA_TYPE, headers=headers)


def _shaping(s: Shaping) -> dict[str, int | float]:
    """What shaped the scores, as the answer names it (JSON keys; ``X-`` headers):
    ``adapted`` first, the knowledge's weight to 4 places."""
    fields: dict[str, int | float] = asdict(s)
    fields["knowledge_weight"] = round(s.knowledge_weight, 4)
    return fields
