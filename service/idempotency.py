"""The ``Idempotency-Key`` header of ``POST /v1/feedback`` and ``POST /v1/decisions``.

    check_idempotency_key(key)    422 naming the header unless absent or well-shaped

Both routes share the store's keys table: a resend with the same key and body is
stored once and answered with the first answer, marked by the ``Idempotent-Replayed``
header (``REPLAYED_HEADER``, as OpenAPI shows it).
"""

from __future__ import annotations

import re
from typing import Any

from xla_costmodel.service.errors import InvalidRequest

# Printable ASCII without spaces: UUIDs, ULIDs, hex digests, "tuner-42/round-3".
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
REPLAYED_HEADER: dict[str, Any] = {
    "description": "true: a resend, answered with the first answer",
    "schema": {"type": "string", "enum": ["true"]},
}


def check_idempotency_key(key: str | None) -> None:
    """422 naming the header unless ``key`` is absent or ``IDEMPOTENCY_KEY``-shaped
    (feedback and decisions share the keys table)."""
    if key is not None and not IDEMPOTENCY_KEY.match(key):
        raise InvalidRequest(
            "must be 1 to 200 printable ASCII characters without spaces",
            "Idempotency-Key",
        )
