"""Measured runtimes from autotuners: stored, and scored against the model online."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import ValidationError

from service.body import parse, read_body
from service.codecs import JSON_MEDIA_TYPE, media_type, validation_error
from service.core.feedback import FeedbackRequest
from service.core.inputs import config_array
from service.deps import FeedbackDep, SettingsDep
from service.errors import UnsupportedMediaType
from service.logs import request_id
from service.schemas import FeedbackIn, FeedbackOut, error_responses, json_only_body

router = APIRouter(prefix="/v1", tags=["feedback"])


@router.post(
    "/feedback",
    response_model=FeedbackOut,
    responses=error_responses(400, 404, 409, 413, 415, 422, 503),
    openapi_extra=json_only_body(FeedbackIn),
)
async def feedback(
    request: Request, recorder: FeedbackDep, settings: SettingsDep
) -> FeedbackOut:
    """Store runtimes measured for configs of a graph (acknowledged once on disk)."""
    body = await read_body(request, settings.max_body_bytes)
    content_type = request.headers.get("content-type")
    req = await parse(_decode, body, content_type, request_id.get())
    request.state.model = req.model
    r = await recorder.record(req)
    return FeedbackOut(
        stored=r.stored, model=r.model, model_version=r.model_version,
        graph_id=r.graph_id, kendall_tau=r.quality.kendall_tau,
        top1_slowdown=r.quality.top1_slowdown,
    )  # fmt: skip


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
    # Nested lists become an array here, off the loop when the body is large.
    configs = None if req.configs is None else config_array(req.configs, "configs")
    return FeedbackRequest(
        req.model, req.model_version, req.graph_id, configs,
        req.config_indices, req.runtimes_ns, rid,
    )  # fmt: skip
