"""One pure-ASGI middleware for every request: request id, body read under a
deadline, in-flight limit, metrics, access log, and the last-resort 500 in the error
shape.

A ``/v1`` request's body is read whole, within ``body_timeout_s`` and
``max_body_bytes``, *before* the request counts as in flight: a slow upload (or 64 of
them) holds a connection, never a slot that ranking needs. Too slow is 408
``request_timeout`` (counted in ``costmodel_body_timeouts``), too big 413; the route
then reads the buffered body as if from the socket.

Buffering itself is bounded: the bodies held at once (read, or being read, until
their answer is sent) may not pass ``body_budget_bytes``. A body declared by
``Content-Length`` reserves its size before a byte is read; a chunked one reserves as
it arrives. Past the budget: 503 ``overloaded`` with Retry-After, so 64 connections
of 63 MB cost 256 MiB, not 4 GB. A JSON body may not pass ``max_json_bytes`` (well
below the npz limit): decoding JSON numbers costs ~10x the text in Python objects.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from xla_costmodel.service.errors import (
    Overloaded,
    PayloadTooLarge,
    RequestTimeout,
    ServiceError,
    error_body,
    http_error,
)
from xla_costmodel.service.logs import request_id
from xla_costmodel.service.metrics import Metrics

log = logging.getLogger("service.access")

REQUEST_ID_HEADER = "x-request-id"
_VALID_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# Health and metrics are never refused and logged at debug level only.
_LIMITED_PREFIX = "/v1/"
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})
_JSON = "application/json"


def _request_id(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            candidate = str(value.decode("latin-1"))
            if _VALID_ID.match(candidate):
                return candidate
    return uuid.uuid4().hex


@dataclass
class _Sent:
    status: int | None = None  # set once the response has started


class RequestContext:
    def __init__(
        self,
        app: ASGIApp,
        max_inflight: int,
        max_body_bytes: int = 64 << 20,
        body_timeout_s: float = 30.0,
        body_budget_bytes: int = 256 << 20,
        max_json_bytes: int = 16 << 20,
    ) -> None:
        self.app = app
        self.max_inflight = max_inflight
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.body_budget_bytes = body_budget_bytes
        self.max_json_bytes = max_json_bytes
        self._inflight = 0
        self._buffered = 0  # bytes reserved by the bodies held now

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _request_id(scope)
        token = request_id.set(rid)
        metrics: Metrics | None = getattr(scope["app"].state, "metrics", None)
        started, sent = time.perf_counter(), _Sent()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent.status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((REQUEST_ID_HEADER.encode(), rid.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        limited = scope["path"].startswith(_LIMITED_PREFIX)
        if metrics is not None:
            metrics.http.inflight.inc()
        holds = False  # an in-flight slot, taken once the body is in
        reserved = _Reserved()  # budget bytes this request's body holds
        try:
            if limited and scope["method"] in _WITH_BODY:
                try:
                    body = await self._body(scope, receive, reserved)
                except ServiceError as refused:
                    if isinstance(refused, RequestTimeout) and metrics is not None:
                        metrics.http.body_timeouts.inc()
                    await _send_error(send_with_id, *http_error(refused))
                    return
                if body is None:  # the client went away mid-body
                    sent.status = 499  # as nginx logs it: nothing was answered
                    return
                receive = _replay(body, receive)
            holds = limited
            self._inflight += int(holds)
            if limited and self._inflight > self.max_inflight:
                exc = Overloaded(f"more than {self.max_inflight} requests in flight")
                await _send_error(send_with_id, *http_error(exc))
            else:
                await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("unhandled error")
            if sent.status is None:
                await _send_error(
                    send_with_id, 500, error_body("internal", "internal error"), {}
                )
        finally:
            self._inflight -= int(holds)
            self._buffered -= reserved.bytes
            status = 500 if sent.status is None else sent.status
            self._record(scope, metrics, status, time.perf_counter() - started)
            request_id.reset(token)

    async def _body(
        self, scope: Scope, receive: Receive, reserved: _Reserved
    ) -> bytes | None:
        """The whole body (None if the client disconnected), or 413/408/503."""
        declared, limit, what = None, self.max_body_bytes, "body"
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit():
                declared = int(value)
            elif name == b"content-type" and _is_json(value):
                limit, what = min(limit, self.max_json_bytes), "JSON body"
        if declared is not None and declared > limit:
            raise _too_large(what, limit)
        self._reserve(reserved, declared or 0)
        chunks: list[bytes] = []
        total = 0
        with anyio.move_on_after(self.body_timeout_s):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                chunk = message.get("body", b"")
                total += len(chunk)
                if total > limit:
                    raise _too_large(what, limit)
                self._reserve(reserved, total)  # chunked: as the bytes arrive
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
        raise RequestTimeout(
            f"the body did not arrive within {self.body_timeout_s:g} s "
            "(COSTMODEL_BODY_TIMEOUT_S)",
            "body",
        )

    def _reserve(self, reserved: _Reserved, size: int) -> None:
        """Hold ``size`` bytes of the budget for this body (what it holds already
        counts), or 503 if the bodies buffered now leave no room for it."""
        more = size - reserved.bytes
        if more <= 0:
            return
        if self._buffered + more > self.body_budget_bytes:
            raise Overloaded(
                f"{self._buffered} bytes of request bodies are buffered; this one "
                f"needs {size} of a budget of {self.body_budget_bytes}: retry later"
            )
        self._buffered += more
        reserved.bytes = size

    def _record(
        self, scope: Scope, metrics: Metrics | None, status: int, seconds: float
    ) -> None:
        route = getattr(scope.get("route"), "path", "unmatched")
        model = str(scope.get("state", {}).get("model", ""))
        method = scope["method"]
        if metrics is not None:
            metrics.http.inflight.dec()
            label = _model_label(scope, model)
            metrics.http.request_seconds.labels(route, method, label).observe(seconds)
            metrics.http.requests.labels(route, method, str(status)).inc()
        level = logging.INFO if route.startswith(_LIMITED_PREFIX) else logging.DEBUG
        log.log(
            level,
            "%s %s %d",
            method,
            scope["path"],
            status,
            extra={
                "route": route,
                "status": status,
                "ms": round(seconds * 1000, 2),
                "model": model,
            },
        )


@dataclass
class _Reserved:
    bytes: int = 0


def _is_json(content_type: bytes) -> bool:
    return content_type.split(b";", 1)[0].strip().lower() == _JSON.encode()


def _too_large(what: str, limit: int) -> PayloadTooLarge:
    if what == "body":
        return PayloadTooLarge(f"body larger than {limit} bytes", "body")
    return PayloadTooLarge(
        f"JSON body larger than {limit} bytes (RequestContext's max_json_bytes, "
        "service/middleware.py): send big batches as application/x-npz, which is "
        "also ~10x cheaper to decode",
        "body",
    )


def _model_label(scope: Scope, model: str) -> str:
    """The model as a metric label: routes set it from the request before it is
    validated, and every name a client invents would otherwise be a new series."""
    registry = getattr(scope["app"].state, "registry", None)
    if not model or registry is None or model in registry:
        return model
    return "unknown"


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the buffered body over, then listens to the client."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _send_error(
    send: Send, status: int, body: dict[str, Any], headers: dict[str, str]
) -> None:
    payload = json.dumps(body).encode()
    raw = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})
