"""Measured runtimes from autotuners: stored in the database, scored online."""

from __future__ import annotations

import hashlib
from functools import partial

from fastapi import APIRouter, Header, Request, Response

from xla_costmodel.service.body import parse, read_body
from xla_costmodel.service.core.feedback import FeedbackRequest
from xla_costmodel.service.core.inputs import config_array
from xla_costmodel.service.deps import FeedbackDep, SettingsDep, WriterDep
from xla_costmodel.service.idempotency import (
    IDEMPOTENCY_KEY,
    REPLAYED_HEADER,
    check_idempotency_key,
)
from xla_costmodel.service.json_body import decode_json, json_rank_graph
from xla_costmodel.service.logs import request_id
from xla_costmodel.service.schemas import (
    FeedbackIn,
    FeedbackOut,
    error_responses,
    json_only_body,
)
from xla_costmodel.service.store import Writer

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
    body = await read_body(request, settings.requests.max_body_bytes)
    digest = hashlib.sha256(body).hexdigest() if idempotency_key else None
    decode = partial(
        _feedback_request,
        request_id=request_id.get(),
        idempotency_key=idempotency_key,
        request_hash=digest,
        writer=writer,
    )
    req = await parse(decode, body, request.headers.get("content-type"))
    request.state.model = req.model
    r = await recorder.record(req)
    if r.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return FeedbackOut.model_validate(r, from_attributes=True)


def _feedback_request(
    body: bytes,
    content_type: str | None,
    *,
    request_id: str | None,
    idempotency_key: str | None,
    request_hash: str | None,
    writer: Writer | None,
) -> FeedbackRequest:
    """The core's request from the validated body, by keyword, with who sent it
    and its idempotency key. Off the loop when the body is large (``parse``): the
    configs' nested lists become an array here."""
    wire = decode_json(FeedbackIn, body, content_type)
    graph = json_rank_graph(wire, len(body))
    configs = None if wire.configs is None else config_array(wire.configs, "configs")
    return FeedbackRequest(
        model=wire.model,
        model_version=wire.model_version,
        graph_id=wire.graph_id,
        graph=graph,
        configs=configs,
        config_indices=wire.config_indices,
        ranking_id=wire.ranking_id,
        runtimes_ns=wire.runtimes_ns,
        target=wire.target,
        compiler=wire.compiler,
        request_id=request_id,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        writer=writer,
    )
