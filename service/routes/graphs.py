"""Graph upload (arrays or HLO text): validate, hash, embed and cache."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request

from xla_costmodel.service.body import parse, read_body
from xla_costmodel.service.codecs import Params, decode_upload, split_names
from xla_costmodel.service.deps import RankerDep, SettingsDep
from xla_costmodel.service.schemas import (
    VERSION,
    GraphIn,
    GraphOut,
    binary_body,
    error_responses,
)

router = APIRouter(prefix="/v1", tags=["ranking"])


@router.put(
    "/graphs",
    response_model=GraphOut,
    responses=error_responses(400, 404, 408, 409, 413, 415, 422, 503),
    openapi_extra=binary_body(GraphIn, hlo=True),
)
async def put_graph(
    request: Request,
    ranker: RankerDep,
    settings: SettingsDep,
    model: str = Query(min_length=1, max_length=64),
    model_version: str | None = Query(None, pattern=VERSION),
    configurable: list[str] | None = Query(
        None,
        description="text/x-hlo bodies, layout models: the configurable instructions "
        "(comma-separated or repeated; default: every convolution, dot and reshape)",
    ),
) -> GraphOut:
    """Upload a graph (JSON, npz or HLO text); its embedding is computed once and cached.

    HLO text is featurized like ``costmodel featurize``, so the graph_id is that of
    the same module sent as arrays."""
    request.state.model = model
    body = await read_body(request, settings.requests.max_body_bytes)
    params = Params(
        model=model, model_version=model_version, configurable=split_names(configurable)
    )
    content_type = request.headers.get("content-type")
    upload = await parse(
        decode_upload, body, content_type, params, settings.limits.max_decoded_bytes
    )
    result = await ranker.upload(upload)
    return GraphOut(
        graph_id=result.graph_id,
        nodes=result.nodes,
        edges=result.edges,
        configurable_nodes=result.configurable_nodes,
        cached=result.cached,
    )
