"""Reading a request body under a byte limit, refusing early when it is declared too big."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
from starlette.requests import Request

from service.errors import MalformedBody, PayloadTooLarge


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The whole body, or ``PayloadTooLarge`` as soon as it exceeds ``max_bytes``."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise MalformedBody("invalid Content-Length", "content-length") from None
        if size > max_bytes:
            raise PayloadTooLarge(_too_large(max_bytes), "body")
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > max_bytes:
            raise PayloadTooLarge(_too_large(max_bytes), "body")
        chunks.append(chunk)
    if total == 0:
        raise MalformedBody("empty body")
    return b"".join(chunks)


def _too_large(max_bytes: int) -> str:
    return f"body larger than {max_bytes} bytes"


T = TypeVar("T")
# Bodies above this size are parsed in a worker thread so the loop keeps serving.
INLINE_BYTES = 256 * 1024


async def parse(fn: Callable[..., T], body: bytes, *args: Any) -> T:
    """``fn(body, *args)``, off the event loop when the body is large."""
    if len(body) <= INLINE_BYTES:
        return fn(body, *args)
    return await anyio.to_thread.run_sync(fn, body, *args)
