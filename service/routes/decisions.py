"""Tuning decisions: stored by autotuners, reused by the next program's tuner."""

from __future__ import annotations

import hashlib

from fastapi import APIRouter, Header, Query, Request, Response
from pydantic import ValidationError

from xla_costmodel.service.body import read_body
from xla_costmodel.service.codecs import JSON_MEDIA_TYPE, media_type, validation_error
from xla_costmodel.service.core.best import BestQuery
from xla_costmodel.service.core.decisions import DecisionRequest
from xla_costmodel.service.deps import BestDep, DecisionsDep, SettingsDep, WriterDep
from xla_costmodel.service.errors import InvalidRequest, UnsupportedMediaType
from xla_costmodel.service.logs import request_id
from xla_costmodel.service.routes.feedback import (
    IDEMPOTENCY_KEY,
    REPLAYED_HEADER,
    check_idempotency_key,
)
from xla_costmodel.service.schemas import (
    COMPILER,
    HEX64,
    TARGET,
    BestOut,
    DecisionIn,
    DecisionOut,
    error_responses,
    json_only_body,
)

router = APIRouter(prefix="/v1", tags=["decisions"])


@router.post(
    "/decisions",
    response_model=DecisionOut,
    responses={
        200: {"headers": {"Idempotent-Replayed": REPLAYED_HEADER}},
        **error_responses(400, 401, 403, 404, 408, 413, 415, 422, 503),
    },
    openapi_extra=json_only_body(DecisionIn),
)
async def decide(
    request: Request,
    response: Response,
    recorder: DecisionsDep,
    settings: SettingsDep,
    writer: WriterDep,
    idempotency_key: str | None = Header(
        None,
        alias="Idempotency-Key",
        description="as for feedback: resends with the same key (and body) are "
        "stored once and get the first answer (stored: false)",
        json_schema_extra={"pattern": IDEMPOTENCY_KEY.pattern, "maxLength": 200},
    ),
) -> DecisionOut:
    """Store what a tuner kept for a program (acknowledged once committed)."""
    check_idempotency_key(idempotency_key)
    body = await read_body(request, settings.max_body_bytes)
    req = _decode(body, request.headers.get("content-type"))
    request.state.model = req.model
    digest = hashlib.sha256(body).hexdigest() if idempotency_key else None
    r = await recorder.record(
        DecisionRequest(
            **req.model_dump(),
            request_id=request_id.get(),
            idempotency_key=idempotency_key,
            request_hash=digest,
            writer=writer,
        )
    )
    if r.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return DecisionOut(**r.to_json())


@router.get(
    "/best",
    response_model=BestOut,
    responses=error_responses(404, 422, 503),
)
async def best(
    request: Request,
    lookup: BestDep,
    model: str = Query(min_length=1, max_length=64),
    graph_id: str | None = Query(
        None, pattern=HEX64, description="the program; or give hlo_fingerprint"
    ),
    hlo_fingerprint: str | None = Query(
        None,
        pattern=HEX64,
        description="the program by the sha256 of its HLO text, as stored with "
        "its decisions (what jit sends: no featurizing)",
    ),
    target: str | None = Query(
        None, pattern=TARGET, description="default: the model's"
    ),
    compiler: str | None = Query(
        None, pattern=COMPILER, description="prefer decisions under this compiler"
    ),
    min_writers: int = Query(
        1, ge=1, le=1000, description="only configs this many writers decided"
    ),
) -> BestOut:
    """The best known decision for a program on a target: a tuner may reuse it
    instead of tuning (selection: docs/reuse.md). No database query per lookup of
    a graph already looked up."""
    request.state.model = model
    if (graph_id is None) == (hlo_fingerprint is None):
        raise InvalidRequest(
            "give exactly one of graph_id and hlo_fingerprint", "graph_id"
        )
    query = BestQuery(model, graph_id, target, compiler, min_writers, hlo_fingerprint)
    choice = await lookup.best(query)
    d = choice.decision
    return BestOut(
        graph_id=choice.graph_id,
        target=choice.target,
        config=d.config.tolist(),
        compiler_options={} if d.kept_default else d.compiler_options,
        speedup=d.speedup,
        speedup_low=d.speedup_low,
        p_value=d.p_value,
        writers=choice.writers,
        decided_at=d.decided_at,
        compiler=d.compiler,
        stale=choice.stale,
        model=d.model,
        kept_default=d.kept_default,
        pairs=d.pairs,
        strategy=d.strategy,
    )


def _decode(body: bytes, content_type: str | None) -> DecisionIn:
    if media_type(content_type) != JSON_MEDIA_TYPE:
        raise UnsupportedMediaType(
            f"content type {content_type or '(none)'!r} is not {JSON_MEDIA_TYPE}",
            "content-type",
        )
    try:
        return DecisionIn.model_validate_json(body)
    except ValidationError as exc:
        raise validation_error(exc) from None
