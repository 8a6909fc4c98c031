"""Measured runtimes from autotuners: stored in the database, scored online."""

from __future__ import annotations

import hashlib
from dataclasses import replace

from fastapi import APIRouter, Header, Request, Response
from pydantic import ValidationError

from xla_costmodel.service.body import parse, read_body
from xla_costmodel.service.codecs import (
    JSON_MEDIA_TYPE,
    json_rank_graph,
    media_type,
    validation_error,
)
from xla_costmodel.service.core.feedback import FeedbackRequest
from xla_costmodel.service.core.inputs import config_array
from xla_costmodel.service.deps import FeedbackDep, SettingsDep, WriterDep
from xla_costmodel.service.errors import UnsupportedMediaType
from xla_costmodel.service.idempotency import (
    IDEMPOTENCY_KEY,
    REPLAYED_HEADER,
    check_idempotency_key,
)
from xla_costmodel.service.logs import request_id
from xla_costmodel.service.schemas import (
    FeedbackIn,
    FeedbackOut,
    error_responses,
    json_only_body,
)

router = APIRouter(prefix="/v1", tags=["feedback"])


@router.post(
    "/feedback",
    response_model=FeedbackOut,
    responses={
        200: {"headers": {"Idempotent-Replayed": REPLAYED_HEADER}},
        **error_responses(400, 401, 403, 404, 408, 409, 413, 415, 422, 429, 503),
    },
    openapi_extra=json_only_body(FeedbackIn),
)
async def feedback(
    request: Request,
    response: Response,
    recorder: FeedbackDep,
    settings: SettingsDep,
    writer: WriterDep,
    idempotency_key: str | None = Header(
        None,
        alias="Idempotency-Key",
        description="resends with the same key (and body) are stored once and get "
        "the first answer (with Idempotent-Replayed: true); the key with another "
        "body: 422 idempotency_key_reused",
        # Documented only: the check below keeps its own message.
        json_schema_extra={"pattern": IDEMPOTENCY_KEY.pattern, "maxLength": 200},
    ),
) -> FeedbackOut:
    """Store runtimes measured for configs of a graph (acknowledged once committed)."""
    check_idempotency_key(idempotency_key)
    body = await read_body(request, settings.max_body_bytes)
    content_type = request.headers.get("content-type")
    req = await parse(_decode, body, content_type, request_id.get())
    request.state.model = req.model
    if idempotency_key is not None:
        digest = hashlib.sha256(body).hexdigest()
        req = req.keyed(idempotency_key, digest)
    req = replace(req, writer=writer)
    r = await recorder.record(req)
    if r.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return FeedbackOut(
        stored=r.stored,
        model=r.model,
        model_version=r.model_version,
        graph_id=r.graph_id,
        target=r.target,
        kendall_tau=r.quality.kendall_tau,
        top1_slowdown=r.quality.top1_slowdown,
    )


def _decode(body: bytes, content_type: str | None, rid: str | None) -> FeedbackRequest:
    if media_type(content_type) != JSON_MEDIA_TYPE:
        raise UnsupportedMediaType(
            f"content type {content_type or '(none)'!r} is not {JSON_MEDIA_TYPE}",
            "content-type",
        )
    try:
        req = FeedbackIn.model_validate_json(body)
    except ValidationError as exc:
        raise validation_error(exc) from None
    graph = json_rank_graph(req, len(body))
    # Nested lists become an array here, off the loop when the body is large.
    configs = None if req.configs is None else config_array(req.configs, "configs")
    return FeedbackRequest(
        req.model,
        req.model_version,
        req.graph_id,
        configs,
        req.config_indices,
        req.runtimes_ns,
        rid,
        graph,
        req.target,
        ranking_id=req.ranking_id,
        compiler=req.compiler,
    )
