"""Who a rank request comes from, for per-client budgets (remembered rankings).

    ClientIds.of(authorization, address) -> "writer:<name>" | "addr:<address>"

A request with a writer's valid bearer token is that writer, wherever it connects
from; any other (no token, a malformed, unknown or revoked one, or the database
down) is its address. An unchecked token would not do: a client sending a fresh
random token with every request would get a fresh budget each time. Ranking never
needs a token, so this never refuses anything; the lookup runs on the anonymous
database slots (a flood of random tokens queues behind other anonymous work, never
in front of a writer), and its answer is remembered for ``ttl_s``.
"""

from __future__ import annotations

import hashlib
import time

from xla_costmodel.service.core.auth import bearer_token
from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.errors import Unauthorized
from xla_costmodel.service.core.lru import LRU
from xla_costmodel.service.store import StoreError


class ClientIds:
    def __init__(self, db: Database, ttl_s: float = 60.0, remember: int = 4096):
        self.db = db
        self.ttl_s = ttl_s
        self._known: LRU[str, tuple[str | None, float]] = LRU(remember)

    async def of(self, authorization: str | None, address: str | None) -> str:
        """The client's budget key."""
        by_address = f"addr:{address or 'unknown'}"
        try:
            token = bearer_token(authorization)
        except Unauthorized:
            return by_address
        if token is None:
            return by_address
        digest = hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()
        seen = self._known.get(digest)
        if seen is not None and time.monotonic() - seen[1] < self.ttl_s:
            name = seen[0]
        else:
            try:
                writer = await self.db.run(lambda s: s.writers.authenticate(token))
            except StoreError:
                return by_address  # not remembered: asked again next time
            name = None if writer is None else writer.name
            self._known.put(digest, (name, time.monotonic()))
        return by_address if name is None else f"writer:{name}"
