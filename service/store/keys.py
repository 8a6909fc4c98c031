"""Idempotency keys (``feedback_keys``): a resent request is stored once.

    replayed(conn, key, request_hash) -> Replayed | None   the first answer, if seen

Feedback and decisions share the table: a key is the client's name for one request,
whichever endpoint it went to, so the same key with another body (or to the other
endpoint) is ``IdempotencyKeyReused``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select

from xla_costmodel.service.store.errors import IdempotencyKeyReused
from xla_costmodel.service.store.schema import feedback_keys


@dataclass(frozen=True)
class Replayed:
    response: dict[str, Any] | None  # the answer stored with the key


def replayed(conn: Connection, key: str, request_hash: str | None) -> Replayed | None:
    """The stored answer if ``key`` was seen (None if not); a different request
    under the same key is an ``IdempotencyKeyReused``."""
    query = select(feedback_keys.c.request_hash, feedback_keys.c.response).where(
        feedback_keys.c.key == key
    )
    row = conn.execute(query).first()
    if row is None:
        return None
    if row.request_hash != (request_hash or ""):
        raise IdempotencyKeyReused(
            f"idempotency key {key!r} was used for a different request"
        )
    return Replayed(json.loads(row.response) if row.response is not None else None)
