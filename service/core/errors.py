"""The service's one exception tree: what the core refuses a request with.

    ServiceError                     base: code, message, field
    ├── InvalidRequest               422 invalid_request: shapes, dtypes, NaN/inf, ranges
    ├── IdempotencyConflict          422 idempotency_key_reused: same key, other request
    ├── DecisionUnmeasured           422 decision_unmeasured: a decision without the
    │                                    writer's own measurements behind it
    ├── MalformedBody                400 malformed_body: unparseable JSON or npz
    ├── UnsupportedMediaType         415 unsupported_media_type
    ├── PayloadTooLarge              413 payload_too_large
    ├── ModelNotFound                404 model_not_found
    ├── GraphNotFound                404 graph_not_found: upload the graph, then retry
    ├── NoDecision                   404 no_decision: no servable decision for the graph
    ├── GraphMetadataNotFound        409 graph_metadata_not_found: raw layout configs
    │   │                                need the graph's node record; re-send the graph
    │   └── GraphMetadataAmbiguous       graph_metadata_ambiguous: uploads named its
    │                                    nodes differently; send the module inline
    ├── VersionNotLoaded             409 model_version_not_loaded
    ├── RankingNotFound              409 ranking_not_found: no remembered rank request
    ├── ReloadFailed                 409 reload_failed: the old version keeps serving
    ├── Unauthorized                 401 unauthorized: no, unknown or revoked token
    ├── Forbidden                    403 forbidden: a token not good for this (field)
    ├── RequestTimeout               408 request_timeout: the body came too slowly
    ├── QuotaExceeded                429 quota_exceeded + Retry-After: writer's quota
    └── Unavailable                  503 + Retry-After
        ├── NotReady                     not_ready: a model is not loaded (yet)
        ├── Overloaded                   overloaded: too many requests in flight
        ├── FeedbackUnavailable          feedback_unavailable: the database cannot store it
        └── DecisionsUnavailable         decisions_unavailable: the database cannot
                                             store or read tuning decisions

The core raises these and knows nothing of HTTP: the statuses above are
``xla_costmodel.service.errors``' table, whose ``http_error`` the app's handlers call.
Anything else that escapes becomes 500 ``internal``.
"""

from __future__ import annotations

from typing import ClassVar


class ServiceError(Exception):
    """A request the service refuses; ``field`` names the offending input, if one."""

    code: ClassVar[str] = "internal"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidRequest(ServiceError):
    code = "invalid_request"


class IdempotencyConflict(ServiceError):
    code = "idempotency_key_reused"


class DecisionUnmeasured(ServiceError):
    """A tuning decision the writer did not measure: no paired runtimes for a
    config, a graph the measurement database lacks, or a kept default of a graph
    the writer never measured (``core/decisions.py``)."""

    code = "decision_unmeasured"


class MalformedBody(ServiceError):
    code = "malformed_body"

    def __init__(self, message: str, field: str | None = "body") -> None:
        super().__init__(message, field)


class UnsupportedMediaType(ServiceError):
    code = "unsupported_media_type"


class PayloadTooLarge(ServiceError):
    code = "payload_too_large"


class ModelNotFound(ServiceError):
    code = "model_not_found"


class GraphNotFound(ServiceError):
    code = "graph_not_found"


class NoDecision(ServiceError):
    code = "no_decision"


class GraphMetadataNotFound(ServiceError):
    code = "graph_metadata_not_found"


class GraphMetadataAmbiguous(GraphMetadataNotFound):
    """Several uploads of the graph named its instructions differently: by id alone,
    which names a raw config means is unknown (never the last upload's guess)."""

    code = "graph_metadata_ambiguous"


class VersionNotLoaded(ServiceError):
    code = "model_version_not_loaded"


class RankingNotFound(ServiceError):
    code = "ranking_not_found"


class ReloadFailed(ServiceError):
    code = "reload_failed"


class Unauthorized(ServiceError):
    code = "unauthorized"


class Forbidden(ServiceError):
    code = "forbidden"


class RequestTimeout(ServiceError):
    code = "request_timeout"


class QuotaExceeded(ServiceError):
    code = "quota_exceeded"

    def __init__(self, message: str, retry_after_s: int, field: str | None = None):
        super().__init__(message, field)
        self.retry_after_s = retry_after_s


class Unavailable(ServiceError):
    retry_after_s: ClassVar[int] = 1


class NotReady(Unavailable):
    code = "not_ready"
    retry_after_s = 5


class Overloaded(Unavailable):
    code = "overloaded"


class FeedbackUnavailable(Unavailable):
    code = "feedback_unavailable"
    retry_after_s = 5


class DecisionsUnavailable(Unavailable):
    code = "decisions_unavailable"
    retry_after_s = 5
