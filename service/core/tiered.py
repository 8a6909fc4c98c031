"""The tiered cache under embeddings, graph records and remembered rankings: a
bounded in-process LRU, then Redis through a codec, best-effort.

    TieredCache.get(key) -> (value, level) | None   memory, then Redis (kept in memory)
    TieredCache.put(key, value)                     memory and Redis
    TieredCache.memory_get(key) -> value | None     memory alone (made recent)
    TieredCache.memory_has(key) -> bool             memory alone (not made recent)
    TieredCache.memory_put(key, value)              memory alone
    TieredCache.redis_get(key) -> value | None      Redis alone
    TieredCache.redis_set(key, value)               Redis alone (``nx``, ``ttl_s``)
    TieredCache.redis_set_many(items, ttl_s=...)    Redis alone, one round trip

Redis is skipped while ``RedisStore`` cools down after a failure (``cache_bypass``).
A failure, or bytes the codec refuses, is a miss plus a log line and a
``cache_error`` metric whose op is the tier's prefix and ``get``/``set``/``decode``
(or a ``Rejected`` error's own op): never an error for the request. A value whose
seal does not verify (``redis_store.Forged``: written by someone else than the
service) is a miss too, counted by the codec's ``kind`` as a Redis integrity failure.
Hits and misses are counted for a ``counted`` tier only (the embedding cache's hit
ratio).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

from xla_costmodel.service.core.lru import LRU
from xla_costmodel.service.core.redis_store import CacheUnavailable, Forged, RedisStore

log = logging.getLogger(__name__)
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
Level = Literal["memory", "redis"]


class CacheEvents(Protocol):
    """What the caches report (``xla_costmodel.service.metrics.cache.CacheMetrics`` implements it)."""

    def cache_hit(self, level: Level) -> None: ...
    def cache_miss(self, level: Level) -> None: ...
    def cache_error(self, level: Level, op: str) -> None: ...
    def cache_bypass(self, level: Level) -> None: ...
    def redis_integrity_failure(self, kind: str) -> None: ...


class Rejected(ValueError):
    """Bytes from Redis that decode but are not a value this caller may use."""

    def __init__(self, message: str, op: str) -> None:
        super().__init__(message)
        self.op = op


@dataclass(frozen=True)
class Codec(Generic[K, V]):
    """How a tier's values live in Redis: under ``key(k)``, as ``dumps(v)``;
    ``loads`` raises ValueError for bytes that are not a value."""

    key: Callable[[K], str]
    dumps: Callable[[V], bytes]
    loads: Callable[[bytes], V]
    what: str  # for the log line: "embedding", "graph record", ...
    ops: str = ""  # the metric's op prefix ("meta_": meta_get, meta_set, ...)
    kind: str = "embedding"  # the integrity metric's label


class TieredCache(Generic[K, V]):
    def __init__(
        self,
        memory: LRU[K, V],
        redis: RedisStore | None,
        codec: Codec[K, V],
        events: CacheEvents,
        counted: bool = False,
    ) -> None:
        self.memory = memory
        self.redis = redis
        self.codec = codec
        self.events = events
        self.counted = counted

    def memory_get(self, key: K) -> V | None:
        """The in-process value, now the most recent (counted as a memory hit or
        miss)."""
        value = self.memory.get(key)
        if self.counted:
            if value is None:
                self.events.cache_miss("memory")
            else:
                self.events.cache_hit("memory")
        return value

    async def get(
        self, key: K, loads: Callable[[bytes], V] | None = None
    ) -> tuple[V, Level] | None:
        """Memory, then Redis; a value found in Redis is kept in memory."""
        value = self.memory_get(key)
        if value is not None:
            return value, "memory"
        value = await self.redis_get(key, loads)
        if value is None:
            return None
        self.memory.put(key, value)
        return value, "redis"

    def memory_has(self, key: K) -> bool:
        """Whether memory holds ``key``, without making it recent or counting it."""
        return key in self.memory

    def memory_put(self, key: K, value: V) -> None:
        """Keep ``value`` in memory alone (Redis has it already, or is not for it)."""
        self.memory.put(key, value)

    async def redis_get(
        self, key: K, loads: Callable[[bytes], V] | None = None
    ) -> V | None:
        """The value in Redis (``loads``: this call's decoder), or None."""
        if not self._usable():
            return None
        assert self.redis is not None
        try:
            data = await self.redis.get(self.codec.key(key))
        except CacheUnavailable as exc:
            self.failed("get", key, exc)
            return None
        except Forged as exc:
            self.forged(key, exc)
            data = None
        if data is None:
            if self.counted:
                self.events.cache_miss("redis")
            return None
        try:
            value = (loads or self.codec.loads)(data)
        except ValueError as exc:
            self.failed(exc.op if isinstance(exc, Rejected) else "decode", key, exc)
            return None
        if self.counted:
            self.events.cache_hit("redis")
        return value

    async def put(self, key: K, value: V) -> None:
        """Memory and Redis."""
        self.memory.put(key, value)
        await self.redis_set(key, value)

    async def redis_set(
        self, key: K, value: V, *, nx: bool = False, ttl_s: int | None = None
    ) -> None:
        """SET in Redis (``nx``: only if absent; ``ttl_s``: else the store's TTL)."""
        if not self._usable():
            return
        assert self.redis is not None
        try:
            await self.redis.set(
                self.codec.key(key), self.codec.dumps(value), nx=nx, ttl_s=ttl_s
            )
        except CacheUnavailable as exc:
            self.failed("set", key, exc)

    async def redis_set_many(self, items: list[tuple[K, V]], *, ttl_s: int) -> None:
        """SET each in Redis in one round trip."""
        if not items or not self._usable():
            return
        assert self.redis is not None
        wire = [(self.codec.key(k), self.codec.dumps(v)) for k, v in items]
        try:
            await self.redis.set_many(wire, ttl_s)
        except CacheUnavailable as exc:
            self.failed("set", items[0][0], exc)

    def failed(self, op: str, key: K, exc: Exception) -> None:
        self.events.cache_error("redis", self.codec.ops + op)
        log.warning(
            "%s %s failed; treating as a miss",
            self.codec.what,
            self.codec.ops + op,
            extra={"cache_key": self.codec.key(key), "error": str(exc)},
        )

    def forged(self, key: K, exc: Forged) -> None:
        self.events.redis_integrity_failure(self.codec.kind)
        log.warning(
            "%s in Redis not sealed by this service; treating as a miss",
            self.codec.what,
            extra={"cache_key": self.codec.key(key), "error": str(exc)},
        )

    def _usable(self) -> bool:
        if self.redis is None:
            return False
        if not self.redis.available:  # cooling down after a failure
            self.events.cache_bypass("redis")
            return False
        return True
