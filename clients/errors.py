"""The client's one exception tree, and the one table that maps HTTP answers onto it.

    CostModelError                  anything the client raises
    ├── ServiceUnavailable          no answer in time: unreachable, timed out, 408/429/5xx
    │   ├── NoService               nothing listens at the URL (connection refused)
    │   └── DeadlineExceeded        the caller's deadline passed before an answer
    ├── ApiError                    the service refused the request as sent (4xx)
    │   ├── InvalidRequest          400/413/415/422, or input rejected before sending
    │   ├── NotFound                404
    │   │   ├── GraphNotFound       graph_not_found: upload the graph, then retry
    │   │   ├── ModelNotFound       model_not_found
    │   │   └── EndpointNotFound    no such route (e.g. a service without /v1/feedback)
    │   └── VersionNotLoaded        409 model_version_not_loaded
    └── ProtocolError               an answer that breaks the API contract

``ServiceUnavailable`` is the family a ``fallback=`` absorbs: the service could not
answer, so the caller's own ordering is as good as anything. ``ApiError`` means the
request itself is wrong and would fail again; it is never retried nor absorbed.
httpx exceptions never escape the client: they are translated here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx


class CostModelError(Exception):
    """Base of every client error; carries what the service said, when it said it."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        field: str | None = None,
        retry_after: float | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.field = field
        self.retry_after = retry_after
        self.retryable = retryable

    def __str__(self) -> str:
        head = " ".join(str(p) for p in (self.status, self.code) if p is not None)
        where = f" (field {self.field})" if self.field else ""
        return f"{head}: {self.message}{where}" if head else f"{self.message}{where}"


class ServiceUnavailable(CostModelError):
    """The service gave no usable answer: refused, overloaded, not ready, failed, slow."""


class NoService(ServiceUnavailable):
    """No connection to the service's address: most often, no ``costmodel serve`` runs
    there. The message says so (``NO_SERVICE``); ``__cause__`` is httpx's error."""


class DeadlineExceeded(ServiceUnavailable):
    """The caller's deadline passed; ``__cause__`` is the last failure, if any."""


class ApiError(CostModelError):
    """The service answered with an error document for a request it will not serve."""


class InvalidRequest(ApiError):
    """The request (or the graph/configs, checked locally first) breaks the contract."""


class NotFound(ApiError):
    pass


class GraphNotFound(NotFound):
    pass


class ModelNotFound(NotFound):
    pass


class NoDecision(NotFound):
    """``GET /v1/best``: nothing was decided for that program on that target."""


class EndpointNotFound(NotFound):
    """A 404/405 without a known error code: the service has no such route."""


class VersionNotLoaded(ApiError):
    pass


class ProtocolError(CostModelError):
    """The service answered something the API contract does not allow."""


# The one table: a known error code wins; otherwise the status decides.
_BY_CODE: Mapping[str, type[CostModelError]] = {
    "graph_not_found": GraphNotFound,
    "model_not_found": ModelNotFound,
    "no_decision": NoDecision,
    "model_version_not_loaded": VersionNotLoaded,
    "invalid_request": InvalidRequest,
    "malformed_body": InvalidRequest,
    "payload_too_large": InvalidRequest,
    "unsupported_media_type": InvalidRequest,
    "not_ready": ServiceUnavailable,
    "overloaded": ServiceUnavailable,
}
_BY_STATUS: Mapping[int, type[CostModelError]] = {
    400: InvalidRequest,
    404: EndpointNotFound,
    405: EndpointNotFound,
    413: InvalidRequest,
    415: InvalidRequest,
    422: InvalidRequest,
    408: ServiceUnavailable,  # the body did not arrive in time: nothing was done
    429: ServiceUnavailable,  # overloaded, or the writer's quota: see Retry-After
}
# Statuses where the same request may succeed later (500 is a bug: not retried).
RETRYABLE_STATUSES = frozenset({408, 429, 502, 503, 504})
# The subset where the service itself refused before acting (overloaded, not ready,
# database unavailable): the only ones safe to repeat for a non-idempotent call
# (feedback is idempotent: it carries an Idempotency-Key).
# A 502/504 comes from a proxy that may have passed the request on before failing.
NOTHING_DONE_STATUSES = frozenset({408, 429, 503})
# A connection refused (or no such host): the message every command prints for it.
NO_SERVICE = "no costmodel service at {url}: start one with `costmodel serve`"


def error_from_response(
    response: httpx.Response, retry_after: float | None, idempotent: bool = True
) -> CostModelError:
    """Translate a non-2xx answer, reading the ``{"error": {...}}`` document if any."""
    code, message, field = _error_document(response)
    status = response.status_code
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status)
    if cls is None:
        cls = ServiceUnavailable if status >= 500 else ApiError
    return cls(
        message,
        status=status,
        code=code,
        field=field,
        retry_after=retry_after,
        retryable=status
        in (RETRYABLE_STATUSES if idempotent else NOTHING_DONE_STATUSES),
    )


def _error_document(response: httpx.Response) -> tuple[str | None, str, str | None]:
    try:
        body: Any = response.json()
    except ValueError:
        text = response.text.strip()[:200]
        return None, text or response.reason_phrase, None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        field = error.get("field")
        return (
            str(error.get("code")) if error.get("code") is not None else None,
            str(error.get("message", response.reason_phrase)),
            str(field) if field is not None else None,
        )
    if isinstance(body, dict) and "detail" in body:  # a framework default, e.g. 404
        return None, str(body["detail"]), None
    return None, response.reason_phrase, None


def json_object(response: httpx.Response) -> dict[str, Any]:
    """A 2xx answer's JSON object; anything else breaks the contract."""
    try:
        body = response.json()
    except ValueError:
        raise ProtocolError(
            f"{response.request.url.path}: answer is not JSON",
            status=response.status_code,
        ) from None
    if not isinstance(body, dict):
        raise ProtocolError(f"{response.request.url.path}: answer is not a JSON object")
    return body


def error_from_transport(exc: httpx.TransportError, idempotent: bool) -> CostModelError:
    """Translate an httpx transport failure.

    Retrying is always safe when the request never left (connect/pool failures);
    after that, only when repeating the request cannot change the outcome.
    """
    never_sent = isinstance(
        exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout
    )
    maybe_sent = isinstance(
        exc, httpx.ReadTimeout | httpx.WriteTimeout | httpx.RemoteProtocolError
    )
    if isinstance(exc, httpx.ConnectError):
        # What a newcomer meets first (no server started): say what to do, once
        # here, for every command and caller that prints the error.
        return NoService(NO_SERVICE.format(url=_origin(exc)), retryable=True)
    return ServiceUnavailable(
        f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
        retryable=never_sent or (maybe_sent and idempotent),
    )


def _origin(exc: httpx.TransportError) -> str:
    """``scheme://host:port`` the failed request went to (``the URL`` if unknown)."""
    try:
        url = exc.request.url
    except RuntimeError:  # raised outside a client: no request attached
        return "the URL"
    return f"{url.scheme}://{url.netloc.decode('ascii')}"
