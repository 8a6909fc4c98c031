"""Tuning decisions: stored by autotuners, reused by the next program's tuner."""

from __future__ import annotations

import hashlib

from fastapi import APIRouter, Header, Query, Request, Response

from xla_costmodel.service.body import read_body
from xla_costmodel.service.core.best import BestQuery, Choice
from xla_costmodel.service.core.decisions import DecisionRequest, Refutation
from xla_costmodel.service.deps import (
    AnonymousDep,
    BestDep,
    DecisionsDep,
    SettingsDep,
    WriterDep,
)
from xla_costmodel.service.errors import InvalidRequest
from xla_costmodel.service.idempotency import (
    IDEMPOTENCY_KEY,
    REPLAYED_HEADER,
    check_idempotency_key,
)
from xla_costmodel.service.json_body import decode_json
from xla_costmodel.service.logs import request_id
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
from xla_costmodel.service.schemas.decisions import RefutedIn
from xla_costmodel.service.store import Writer

router = APIRouter(prefix="/v1", tags=["decisions"])


@router.post(
    "/decisions",
    response_model=DecisionOut,
    responses={
        200: {"headers": {"Idempotent-Replayed": REPLAYED_HEADER}},
        **error_responses(400, 401, 403, 404, 408, 413, 415, 422, 429, 503),
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
    """Store what a tuner kept for a program and the pairs that measured it
    (acknowledged once committed; docs/reuse.md)."""
    check_idempotency_key(idempotency_key)
    body = await read_body(request, settings.requests.max_body_bytes)
    wire = decode_json(DecisionIn, body, request.headers.get("content-type"))
    request.state.model = wire.model
    digest = hashlib.sha256(body).hexdigest() if idempotency_key else None
    req = _decision_request(
        wire,
        request_id=request_id.get(),
        idempotency_key=idempotency_key,
        request_hash=digest,
        writer=writer,
    )
    r = await recorder.record(req)
    if r.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return DecisionOut.model_validate(r, from_attributes=True)


@router.get(
    "/best",
    response_model=BestOut,
    responses=error_responses(404, 422, 503),
)
async def best(
    request: Request,
    lookup: BestDep,
    anonymous: AnonymousDep,
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
        1,
        ge=1,
        le=1000,
        description="only a row this many writers support (docs/reuse.md)",
    ),
) -> BestOut:
    """The best known decision for a program on a target: a tuner may reuse it
    instead of tuning (the rule: docs/reuse.md, "What the fleet applies"). No
    database query per lookup of a graph or fingerprint already looked up."""
    request.state.model = model
    if (graph_id is None) == (hlo_fingerprint is None):
        raise InvalidRequest(
            "give exactly one of graph_id and hlo_fingerprint", "graph_id"
        )
    query = BestQuery(
        model=model,
        graph_id=graph_id,
        hlo_fingerprint=hlo_fingerprint,
        target=target,
        compiler=compiler,
        min_writers=min_writers,
        anonymous=anonymous,
    )
    return _best_out(await lookup.best(query))


def _decision_request(
    wire: DecisionIn,
    *,
    request_id: str | None,
    idempotency_key: str | None,
    request_hash: str | None,
    writer: Writer | None,
) -> DecisionRequest:
    """The core's request from the validated body, by keyword. The claims
    (``speedup``, ``speedup_low``, ...) stop here: the core computes them."""
    return DecisionRequest(
        model=wire.model,
        model_version=wire.model_version,
        target=wire.target,
        compiler=wire.compiler,
        graph_id=wire.graph_id,
        hlo_fingerprint=wire.hlo_fingerprint,
        config=wire.config,
        paired_runtimes_ns=wire.paired_runtimes_ns,
        compiler_options=wire.compiler_options,
        budget=wire.budget,
        strategy=wire.strategy,
        kept_default=wire.kept_default,
        refuted=None if wire.refuted is None else _refutation(wire.refuted),
        request_id=request_id,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        writer=writer,
    )


def _refutation(wire: RefutedIn) -> Refutation:
    return Refutation(
        config=wire.config,
        reason=wire.reason,
        paired_runtimes_ns=wire.paired_runtimes_ns,
    )


def _best_out(choice: Choice) -> BestOut:
    """The answer: the chosen decision's fields and what the lookup found around
    it, read from the choice by attribute."""
    return BestOut.model_validate(choice, from_attributes=True)
