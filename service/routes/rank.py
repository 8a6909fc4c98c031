"""Rank configs for a graph (by graph_id, or sent inline)."""

from __future__ import annotations

from dataclasses import replace
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
    body = await read_body(request, settings.max_body_bytes)
    params = Params(
        q.model,
        q.model_version,
        q.graph_id,
        q.top_k,
        None,
        q.target,
        q.adapt,
        q.portfolio,
        q.compiler,
    )
    content_type = request.headers.get("content-type")
    req = await parse(
        decode_rank, body, content_type, params, settings.max_decoded_bytes
    )
    request.state.model = req.model
    result = await ranker.rank(replace(req, client=client))
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
    answer = {
        "model": r.model,
        "model_version": r.model_version,
        "graph_id": r.graph_id,
        "cache": r.cache,
        "adapted": r.adapted,
        "ranking_id": r.ranking_id,
        "ranking": ranking,
        "scores": r.scores.tolist(),
        "top_k": top_k,
        **_shaping(r),
        "portfolio": None if r.portfolio is None else r.portfolio.tolist(),
    }
    return Response(pydantic_core.to_json(answer), media_type="application/json")


def _npz_answer(r: RankResult) -> Response:
    headers = {
        "X-Model": r.model,
        "X-Model-Version": r.model_version,
        "X-Cache": r.cache,
        "X-Graph-ID": r.graph_id,
        "X-Adapted": str(r.adapted),
        "X-Ranking-ID": r.ranking_id,
        **{f"X-{k.replace('_', '-').title()}": str(v) for k, v in _shaping(r).items()},
    }
    content = encode_rank_npz(r.ranking, r.scores, r.top_k, r.portfolio)
    return Response(content, media_type=NPZ_MEDIA_TYPE, headers=headers)


def _shaping(r: RankResult) -> dict[str, int | float]:
    """What shaped the scores besides the graph's own measurements (``adapted``)."""
    s = r.shaped
    return {
        "target_programs": 0 if s is None else s.target_programs,
        "target_measurements": 0 if s is None else s.target_measurements,
        "knowledge_weight": 0.0 if s is None else round(s.knowledge_weight, 4),
        "prior_weight": 1.0 if s is None else s.prior_weight,
    }
