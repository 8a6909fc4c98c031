"""The one error shape (``{"error": {"code", "message", "field"}}``) and the
``responses=`` entries that show it, with each status's codes and headers, in OpenAPI.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from xla_costmodel.service.schemas.common import Wire, header


class ErrorDetail(Wire):
    code: str = Field(examples=["invalid_request"])
    message: str
    field: str | None = Field(
        None, description="the offending input: a body key path or a query parameter"
    )


class ErrorOut(Wire):
    """Every error response, whatever the status."""

    error: ErrorDetail


_ERRORS = {
    400: "malformed_body: the JSON or npz cannot be parsed",
    401: "unauthorized: no bearer token, or (feedback, decisions) an unknown or "
    "revoked one",
    403: "forbidden: wrong admin token, the admin API is disabled, or (feedback, "
    "decisions; field target) a writer token not good for the target",
    408: "request_timeout: the body did not arrive within COSTMODEL_BODY_TIMEOUT_S",
    404: "model_not_found, graph_not_found (upload the graph, then retry), or "
    "no_decision (GET /v1/best: no decision qualifies)",
    409: "model_version_not_loaded, reload_failed (the old version keeps serving), or "
    "ranking_not_found (feedback by config_indices: send configs instead), or "
    "graph_metadata_not_found (raw layout configs: re-send the graph)",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request: the field names the offending input; "
    "idempotency_key_reused; decision_unmeasured (POST /v1/decisions: no paired "
    "runtimes, a graph the database lacks, or a kept default never measured)",
    429: "quota_exceeded: the writer stored its quota of measurements and "
    "decisions; see Retry-After",
    503: "not_ready, overloaded, feedback_unavailable or decisions_unavailable "
    "(nothing stored); see Retry-After",
}


_ERROR_HEADERS = {
    401: {"WWW-Authenticate": header("Bearer")},
    429: {"Retry-After": header("seconds to wait before retrying", "integer")},
    503: {"Retry-After": header("seconds to wait before retrying", "integer")},
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries so OpenAPI shows the error model (and the headers that
    come with it) for each status."""
    return {
        s: {"model": ErrorOut, "description": _ERRORS[s]}
        | ({"headers": _ERROR_HEADERS[s]} if s in _ERROR_HEADERS else {})
        for s in statuses
    }
