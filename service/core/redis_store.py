"""The shared level of the caches (embeddings, graph records, rankings): Redis,
best-effort.

One ``redis.asyncio`` client with short socket timeouts and no retries. Any failure
raises ``CacheUnavailable`` and opens a short cooldown during which Redis is skipped,
so an outage costs each request nothing instead of a timeout.

Whoever holds the Redis password is not trusted with what the service computes: every
value is written sealed (``Seal``: HMAC-SHA256 under a server secret, over the key's
name and the bytes, so a value copied to another key fails too) and a value whose MAC
does not verify raises ``Forged``: a miss for the caller, counted as
``costmodel_redis_integrity_failures_total{kind}``, and no cooldown (a forger must not
be able to switch Redis off for honest values).
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import time
from collections.abc import Callable

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

KEY_PREFIX = "costmodel:emb"
META_PREFIX = "costmodel:meta:v2"
RECENT_PREFIX = "costmodel:recent:v2"


class CacheUnavailable(Exception):
    """Redis failed (down, slow, or refused the command)."""


class Forged(Exception):
    """A value or message from Redis that this service's secret did not seal."""


MAC_BYTES = hashlib.sha256().digest_size


class Seal:
    """HMAC-SHA256 seals: ``seal(name, value)`` is the MAC, then the value."""

    def __init__(self, key: bytes) -> None:
        if not key:
            raise ValueError("a seal needs a key")
        self._key = key

    def _mac(self, name: str, value: bytes) -> bytes:
        # The name is a Redis key or channel: no NUL, so the framing is unambiguous.
        return hmac.digest(self._key, name.encode() + b"\0" + value, "sha256")

    def seal(self, name: str, value: bytes) -> bytes:
        return self._mac(name, value) + value

    def open(self, name: str, sealed: bytes) -> bytes:
        """The value, or ``Forged`` if ``sealed`` is not one of this key's seals."""
        mac, value = sealed[:MAC_BYTES], sealed[MAC_BYTES:]
        if len(mac) < MAC_BYTES or not hmac.compare_digest(mac, self._mac(name, value)):
            raise Forged(f"{name}: the value's MAC does not verify")
        return value


def embedding_key(model: str, version: str, graph_id: str) -> str:
    """``costmodel:emb:<model>:<version>:<graph_id>``: a new version never sees old keys."""
    return f"{KEY_PREFIX}:{model}:{version}:{graph_id}"


def meta_key(graph_id: str, names_id: str | None = None) -> str:
    """``costmodel:meta:v2:<graph_id>[:<names_id>]``: a graph's record, whatever the
    model; one per naming of its instructions (``names_id``), never replaced."""
    return f"{META_PREFIX}:{graph_id}" + ("" if names_id is None else f":{names_id}")


def namings_key(graph_id: str) -> str:
    """``costmodel:meta:v2:<graph_id>:namings``: the set of its records' names ids."""
    return f"{META_PREFIX}:{graph_id}:namings"


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
    """GET/SET of sealed blobs with a TTL, and a cooldown after failures.

    ``seal`` None stores values as they are: for tests that read Redis directly;
    the service always passes one (``app.py``)."""

    def __init__(
        self,
        client: Redis,
        ttl_s: int,
        cooldown_s: float,
        clock: Callable[[], float] = time.monotonic,
        seal: Seal | None = None,
    ) -> None:
        self.client = client
        self.ttl_s = ttl_s
        self.cooldown_s = cooldown_s
        self.seal = seal
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
        if value is None or self.seal is None:
            return value
        return self.seal.open(key, value)  # Forged: the caller's miss

    async def set(
        self, key: str, value: bytes, *, nx: bool = False, ttl_s: int | None = None
    ) -> None:
        """Store with the TTL (``ttl_s`` or the store's); ``nx``: only if the key
        does not exist yet."""
        try:
            await self.client.set(
                key, self._sealed(key, value), ex=ttl_s or self.ttl_s, nx=nx
            )
        except (TimeoutError, RedisError, OSError) as exc:
            raise self._failed(exc) from None

    async def set_many(self, items: list[tuple[str, bytes]], ttl_s: int) -> None:
        """Store each with the TTL in one round trip (a pipeline, not a transaction)."""
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for key, value in items:
                    pipe.set(key, self._sealed(key, value), ex=ttl_s)
                await pipe.execute()
        except (TimeoutError, RedisError, OSError) as exc:
            raise self._failed(exc) from None

    async def add_member(self, key: str, member: bytes) -> None:
        """SADD ``member`` (sealed) to the set at ``key``, with the store's TTL."""
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.sadd(key, self._sealed(key, member))
                pipe.expire(key, self.ttl_s)
                await pipe.execute()
        except (TimeoutError, RedisError, OSError) as exc:
            raise self._failed(exc) from None

    async def members(self, key: str) -> tuple[builtins.set[bytes], int]:
        """The members of the set at ``key`` that are sealed, and how many were not."""
        try:
            found = await self.client.smembers(key)
        except (TimeoutError, RedisError, OSError) as exc:
            raise self._failed(exc) from None
        members = {m for m in found if isinstance(m, bytes)}
        if self.seal is None:
            return members, 0
        sealed: builtins.set[bytes] = builtins.set()
        forged = 0
        for member in members:
            try:
                sealed.add(self.seal.open(key, member))
            except Forged:
                forged += 1
        return sealed, forged

    async def delete(self, key: str) -> None:
        try:
            await self.client.delete(key)
        except (TimeoutError, RedisError, OSError) as exc:
            raise self._failed(exc) from None

    async def aclose(self) -> None:
        await self.client.aclose()

    def _sealed(self, key: str, value: bytes) -> bytes:
        return value if self.seal is None else self.seal.seal(key, value)

    def _failed(self, exc: BaseException) -> CacheUnavailable:
        self._down_until = self._clock() + self.cooldown_s
        return CacheUnavailable(f"{type(exc).__name__}: {exc}")
