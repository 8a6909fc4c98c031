"""The embedding cache: in-process LRU, then Redis, with single-flight fills.

A lookup tries memory, then Redis (when configured and not cooling down). A miss for
a graph that comes with its arrays is filled by exactly one computation per key,
however many requests ask at once: the fill runs as its own task, so a cancelled
request does not cancel the work others are waiting for. Redis errors are counted,
logged and treated as misses; they never fail a request. So is a Redis value whose
arrays or shapes are not the ones the artifact's manifest declares (``op="shape"``):
Redis is shared, and the scorer must only see what it was exported for.

``meta`` keeps, next to the embeddings, each layout graph's record of its
configurable nodes (``xla_costmodel.service.core.graph_meta``), which raw configs resolve against.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from xla_costmodel.runner import Embedding
from xla_costmodel.service.core import blob
from xla_costmodel.service.core.graph_meta import GraphMetaStore
from xla_costmodel.service.core.memory import MemoryLRU
from xla_costmodel.service.core.redis_store import (
    RedisStore,
    StoreUnavailable,
    embedding_key,
)

log = logging.getLogger(__name__)

Source = Literal["memory", "redis", "miss"]
Level = Literal["memory", "redis"]


class CacheEvents(Protocol):
    """What the cache reports (``xla_costmodel.service.metrics.Metrics`` implements it)."""

    def cache_hit(self, level: Level) -> None: ...
    def cache_miss(self, level: Level) -> None: ...
    def cache_error(self, level: Level, op: str) -> None: ...
    def cache_bypass(self, level: Level) -> None: ...


@dataclass(frozen=True)
class CacheKey:
    model: str
    version: str
    graph_id: str

    @property
    def redis_key(self) -> str:
        return embedding_key(self.model, self.version, self.graph_id)


Found = tuple[Embedding, Source]


class EmbeddingCache:
    def __init__(
        self, memory: MemoryLRU, redis: RedisStore | None, events: CacheEvents
    ) -> None:
        self.memory = memory
        self.redis = redis
        self.events = events
        self.meta = GraphMetaStore(redis, events)
        self._fills: dict[CacheKey, asyncio.Task[Found]] = {}

    async def lookup(self, key: CacheKey, names: Collection[str]) -> Found | None:
        """The cached embedding (waiting for a fill under way), or None."""
        fill = self._fills.get(key)
        if fill is not None:
            return await asyncio.shield(fill)
        embedding = self._from_memory(key)
        if embedding is not None:
            return embedding, "memory"
        embedding = await self._from_redis(key, names)
        return None if embedding is None else (embedding, "redis")

    async def get_or_compute(
        self,
        key: CacheKey,
        names: Collection[str],
        compute: Callable[[], Awaitable[Embedding]],
    ) -> Found:
        """The cached embedding, or ``compute()``'s, run once per key at a time."""
        fill = self._fills.get(key)
        if fill is None:
            embedding = self._from_memory(key)
            if embedding is not None:
                return embedding, "memory"
            # Registered before the first await, so concurrent callers join it.
            fill = asyncio.ensure_future(self._fill(key, names, compute))
            self._fills[key] = fill
            fill.add_done_callback(lambda done: self._settled(key, done))
        return await asyncio.shield(fill)

    async def aclose(self) -> None:
        for fill in list(self._fills.values()):
            fill.cancel()
        if self.redis is not None:
            await self.redis.aclose()

    async def _fill(
        self,
        key: CacheKey,
        names: Collection[str],
        compute: Callable[[], Awaitable[Embedding]],
    ) -> Found:
        embedding = await self._from_redis(key, names)
        if embedding is not None:
            return embedding, "redis"
        embedding = await compute()
        self.memory.put(key, embedding)
        await self._to_redis(key, embedding)
        return embedding, "miss"

    def _settled(self, key: CacheKey, fill: asyncio.Task[Found]) -> None:
        self._fills.pop(key, None)
        if not fill.cancelled():
            fill.exception()  # retrieved here: its waiters, if any, re-raise it

    def _from_memory(self, key: CacheKey) -> Embedding | None:
        embedding = self.memory.get(key)
        if embedding is None:
            self.events.cache_miss("memory")
        else:
            self.events.cache_hit("memory")
        return embedding

    async def _from_redis(
        self, key: CacheKey, names: Collection[str]
    ) -> Embedding | None:
        if self.redis is None:
            return None
        if not self.redis.available:
            self.events.cache_bypass("redis")
            return None
        try:
            value = await self.redis.get(key.redis_key)
        except StoreUnavailable as exc:
            self._redis_failed("get", key, exc)
            return None
        if value is None:
            self.events.cache_miss("redis")
            return None
        try:
            embedding = blob.loads(value)
            if set(embedding) != set(names):
                raise blob.BlobError(f"arrays {sorted(embedding)} != {sorted(names)}")
        except blob.BlobError as exc:
            self._redis_failed("decode", key, exc)
            return None
        if isinstance(names, Mapping):  # name -> declared dims (the manifest's)
            try:
                blob.check_shapes(embedding, names)
            except blob.BlobError as exc:
                self._redis_failed("shape", key, exc)
                return None
        self.events.cache_hit("redis")
        self.memory.put(key, embedding)
        return embedding

    async def _to_redis(self, key: CacheKey, embedding: Embedding) -> None:
        if self.redis is None:
            return
        if not self.redis.available:
            self.events.cache_bypass("redis")
            return
        try:
            await self.redis.set(key.redis_key, blob.dumps(embedding))
        except StoreUnavailable as exc:
            self._redis_failed("set", key, exc)

    def _redis_failed(self, op: str, key: CacheKey, exc: Exception) -> None:
        self.events.cache_error("redis", op)
        log.warning(
            "redis cache %s failed; treating as a miss",
            op,
            extra={"cache_key": key.redis_key, "error": str(exc)},
        )
