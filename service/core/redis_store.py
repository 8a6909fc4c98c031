"""The shared level of the caches (embeddings, graph records, rankings): Redis,
best-effort.

One ``redis.asyncio`` client with short socket timeouts and no retries. Any failure
raises ``CacheUnavailable`` and opens a short cooldown during which Redis is skipped,
so an outage costs each request nothing instead of a timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

KEY_PREFIX = "costmodel:emb"
META_PREFIX = "costmodel:meta:v1"
RECENT_PREFIX = "costmodel:recent:v2"


class CacheUnavailable(Exception):
    """Redis failed (down, slow, or refused the command)."""


def embedding_key(model: str, version: str, graph_id: str) -> str:
    """``costmodel:emb:<model>:<version>:<graph_id>``: a new version never sees old keys."""
    return f"{KEY_PREFIX}:{model}:{version}:{graph_id}"


def meta_key(graph_id: str) -> str:
    """``costmodel:meta:v1:<graph_id>``: a graph's record, whatever the model."""
    return f"{META_PREFIX}:{graph_id}"


def recent_key(model: str, version: str, graph_id: str, ranking_id: str) -> str:
    """``costmodel:recent:v2:<model>:<version>:<graph_id>:<ranking_id>``: one rank
    answer's batch."""
    return f"{RECENT_PREFIX}:{model}:{version}:{graph_id}:{ranking_id}"


def connect(url: str, timeout_s: float, connect_timeout_s: float) -> Redis:
    """A client that fails fast: explicit timeouts, no retries, binary values."""
    return Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=connect_timeout_s,
        retry=Retry(NoBackoff(), 0),
        retry_on_error=[],
        decode_responses=False,
        health_check_interval=0,
    )


class RedisStore:
    """GET/SET of blobs with a TTL, and a cooldown after failures."""

    def __init__(
        self,
        client: Redis,
        ttl_s: int,
        cooldown_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.ttl_s = ttl_s
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._down_until = 0.0

    @property
    def available(self) -> bool:
        """False during the cooldown that follows a failure."""
        return self._clock() >= self._down_until

    async def get(self, key: str) -> bytes | None:
        try:
            value = await self.client.get(key)
        except (TimeoutError, RedisError, OSError) as exc:
            raise self._failed(exc) from None
        if value is not None and not isinstance(value, bytes):
            raise CacheUnavailable(f"unexpected reply type {type(value).__name__}")
        return value

    async def set(
        self, key: str, value: bytes, *, nx: bool = False, ttl_s: int | None = None
    ) -> None:
        """Store with the TTL (``ttl_s`` or the store's); ``nx``: only if the key
        does not exist yet."""
        try:
            await self.client.set(key, value, ex=ttl_s or self.ttl_s, nx=nx)
        except (TimeoutError, RedisError, OSError) as exc:
            raise self._failed(exc) from None

    async def set_many(self, items: list[tuple[str, bytes]], ttl_s: int) -> None:
        """Store each with the TTL in one round trip (a pipeline, not a transaction)."""
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for key, value in items:
                    pipe.set(key, value, ex=ttl_s)
                await pipe.execute()
        except (TimeoutError, RedisError, OSError) as exc:
            raise self._failed(exc) from None

    async def delete(self, key: str) -> None:
        try:
            await self.client.delete(key)
        except (TimeoutError, RedisError, OSError) as exc:
            raise self._failed(exc) from None

    async def aclose(self) -> None:
        await self.client.aclose()

    def _failed(self, exc: BaseException) -> CacheUnavailable:
        self._down_until = self._clock() + self.cooldown_s
        return CacheUnavailable(f"{type(exc).__name__}: {exc}")
