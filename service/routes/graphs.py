"""Graph upload: validate, hash, embed and cache."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request

from service.body import parse, read_body
from service.codecs import Params, decode_upload
from service.deps import RankerDep, SettingsDep
from service.schemas import VERSION, GraphIn, GraphOut, binary_body, error_responses

router = APIRouter(prefix="/v1", tags=["ranking"])


@router.put(
    "/graphs",
    response_model=GraphOut,
    responses=error_responses(400, 404, 409, 413, 415, 422, 503),
    openapi_extra=binary_body(GraphIn),
)
async def put_graph(
    request: Request,
    ranker: RankerDep,
    settings: SettingsDep,
    model: str = Query(min_length=1, max_length=64),
    model_version: str | None = Query(None, pattern=VERSION),
) -> GraphOut:
    """Upload a graph (JSON or npz); its embedding is computed once and cached."""
    request.state.model = model
    body = await read_body(request, settings.max_body_bytes)
    params = Params(model=model, model_version=model_version)
    content_type = request.headers.get("content-type")
    upload = await parse(
        decode_upload, body, content_type, params, settings.max_decoded_bytes
    )
    result = await ranker.upload(upload)
    return GraphOut(
        graph_id=result.graph_id,
        nodes=result.nodes,
        edges=result.edges,
        configurable_nodes=result.configurable_nodes,
        cached=result.cached,
    )
