"""The one table that maps the core's exception tree to HTTP, and the one JSON
error shape.

The tree is ``xla_costmodel.service.core.errors`` (drawn there, with each class's
status and code); it is re-exported here for the HTTP layer. ``http_error`` gives
status, body and headers; ``xla_costmodel.service.app`` installs the handlers that
call it. Anything else that escapes becomes 500 ``internal``.
"""

from __future__ import annotations

from typing import Any

from xla_costmodel.service.core.errors import (
    DecisionsUnavailable,
    DecisionUnmeasured,
    FeedbackUnavailable,
    Forbidden,
    GraphMetadataAmbiguous,
    GraphMetadataNotFound,
    GraphNotFound,
    IdempotencyConflict,
    InvalidRequest,
    MalformedBody,
    ModelNotFound,
    NoDecision,
    NotReady,
    Overloaded,
    PayloadTooLarge,
    QuotaExceeded,
    RankingNotFound,
    ReloadFailed,
    RequestTimeout,
    ServiceError,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
    VersionNotLoaded,
)

__all__ = [
    "HTTP_STATUS",
    "DecisionUnmeasured",
    "DecisionsUnavailable",
    "FeedbackUnavailable",
    "Forbidden",
    "GraphMetadataAmbiguous",
    "GraphMetadataNotFound",
    "GraphNotFound",
    "IdempotencyConflict",
    "InvalidRequest",
    "MalformedBody",
    "ModelNotFound",
    "NoDecision",
    "NotReady",
    "Overloaded",
    "PayloadTooLarge",
    "QuotaExceeded",
    "RankingNotFound",
    "ReloadFailed",
    "RequestTimeout",
    "ServiceError",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
    "VersionNotLoaded",
    "error_body",
    "http_error",
]

# The one table: error class -> HTTP status. Subclasses inherit their parent's row.
HTTP_STATUS: dict[type[ServiceError], int] = {
    InvalidRequest: 422,
    IdempotencyConflict: 422,
    DecisionUnmeasured: 422,
    MalformedBody: 400,
    UnsupportedMediaType: 415,
    PayloadTooLarge: 413,
    ModelNotFound: 404,
    GraphNotFound: 404,
    NoDecision: 404,
    GraphMetadataNotFound: 409,
    VersionNotLoaded: 409,
    RankingNotFound: 409,
    ReloadFailed: 409,
    Unauthorized: 401,
    Forbidden: 403,
    RequestTimeout: 408,
    QuotaExceeded: 429,
    Unavailable: 503,
}


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    """The one JSON error shape: ``{"error": {"code", "message", "field"}}``."""
    return {"error": {"code": code, "message": message, "field": field}}


def http_error(exc: ServiceError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Status, body and headers for a domain error (500 for an unmapped class)."""
    status = next(
        (HTTP_STATUS[cls] for cls in type(exc).__mro__ if cls in HTTP_STATUS), 500
    )
    headers: dict[str, str] = {}
    if isinstance(exc, Unavailable | QuotaExceeded):
        headers["Retry-After"] = str(exc.retry_after_s)
    if isinstance(exc, RequestTimeout):  # the rest of the body is not read
        headers["Connection"] = "close"
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    return status, error_body(exc.code, exc.message, exc.field), headers
