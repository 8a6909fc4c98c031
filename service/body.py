"""Reading a request: its body under a byte limit (refused early when it is declared
too big), its media type, and query parameters a route parses itself
(``parse_query``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import anyio.to_thread
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from xla_costmodel.service.core.inputs import INLINE_BYTES
from xla_costmodel.service.errors import InvalidRequest, MalformedBody, PayloadTooLarge
from xla_costmodel.service.schemas import NPZ_MEDIA_TYPE


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


def media_type(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` value, lower case, without parameters."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def _too_large(max_bytes: int) -> str:
    return f"body larger than {max_bytes} bytes"


Q = TypeVar("Q", bound=BaseModel)


def parse_query(model: type[Q], params: Mapping[str, str]) -> Q:
    """``model`` from the query (of a repeated key the last value, as FastAPI takes
    it); a bad value is a 422 naming the parameter, as FastAPI's validation was."""
    try:
        return model.model_validate(dict(params))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        raise InvalidRequest(first["msg"], field) from None


T = TypeVar("T")


async def parse(
    fn: Callable[..., T], body: bytes, content_type: str | None, *args: Any
) -> T:
    """``fn(body, content_type, *args)``, off the event loop unless the body is small
    JSON, text, or an npz whose members are all stored: a compressed npz body's size
    says nothing of its decoded size, a stored one's does. The thread hop cost a
    1-config rank (an npz of ~400 bytes) more than decoding it."""
    if len(body) <= INLINE_BYTES and (
        media_type(content_type) != NPZ_MEDIA_TYPE or _stored_only(body)
    ):
        return fn(body, content_type, *args)
    return await anyio.to_thread.run_sync(fn, body, content_type, *args)


_CENTRAL_ENTRY = b"PK\x01\x02"  # a zip central directory entry; method at +10


def _stored_only(body: bytes) -> bool:
    """Whether every central directory entry of the zip in ``body`` says "stored"
    (method 0): what the zip reader decodes by. Bytes inside a member that happen
    to look like an entry can only send the body to the thread, never keep a
    compressed member on the loop: the real entries are all checked."""
    at = body.find(_CENTRAL_ENTRY)
    while at != -1:
        if body[at + 10 : at + 12] != b"\x00\x00":
            return False
        at = body.find(_CENTRAL_ENTRY, at + 4)
    return True
