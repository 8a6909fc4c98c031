"""The embedding cache: a tiered cache (in-process LRU, then Redis) with
single-flight fills.

A lookup tries memory, then Redis (when configured and not cooling down). A miss for
a graph that comes with its arrays is filled by exactly one computation per key,
however many requests ask at once: the fill runs as its own task, so a cancelled
request does not cancel the work others are waiting for. Redis errors are counted,
logged and treated as misses; they never fail a request. So is a Redis value whose
arrays or shapes are not the ones the artifact's manifest declares (``op="shape"``):
Redis is shared, and the scorer must only see what it was exported for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Literal

from xla_costmodel.runner import Embedding
from xla_costmodel.service.core import blob
from xla_costmodel.service.core.lru import LRU
from xla_costmodel.service.core.redis_store import RedisStore, embedding_key
from xla_costmodel.service.core.tiered import (
    CacheEvents,
    Codec,
    Rejected,
    TieredCache,
)

# Where a lookup found the embedding ("miss": computed here).
FoundIn = Literal["memory", "redis", "miss"]
# Dict, key and array headers: a rough per-entry cost on top of the array data.
ENTRY_OVERHEAD = 512


@dataclass(frozen=True)
class CacheKey:
    model: str
    version: str
    graph_id: str

    @property
    def redis_key(self) -> str:
        return embedding_key(self.model, self.version, self.graph_id)


Found = tuple[Embedding, FoundIn]


def embedding_nbytes(embedding: Embedding) -> int:
    return ENTRY_OVERHEAD + sum(a.nbytes for a in embedding.values())


def embedding_memory(max_bytes: int) -> LRU[CacheKey, Embedding]:
    """The in-process level: least-recently-used embeddings, ``max_bytes`` in all."""
    return LRU(max_bytes, embedding_nbytes)


def _loads(names: Collection[str], value: bytes) -> Embedding:
    """The embedding, if it has the arrays ``names`` lists (and, for a mapping of
    name -> the manifest's declared dims, their shapes)."""
    embedding = blob.loads(value)
    if set(embedding) != set(names):
        raise blob.BlobError(f"arrays {sorted(embedding)} != {sorted(names)}")
    if isinstance(names, Mapping):
        try:
            blob.check_shapes(embedding, names)
        except blob.BlobError as exc:
            raise Rejected(str(exc), "shape") from None
    return embedding


EMBEDDINGS: Codec[CacheKey, Embedding] = Codec(
    lambda key: key.redis_key, blob.dumps, blob.loads, "redis cache"
)


class EmbeddingCache:
    def __init__(
        self,
        memory: LRU[CacheKey, Embedding],
        redis: RedisStore | None,
        events: CacheEvents,
    ) -> None:
        self.tier = TieredCache(memory, redis, EMBEDDINGS, events, counted=True)
        self._fills: dict[CacheKey, asyncio.Task[Found]] = {}

    async def lookup(self, key: CacheKey, names: Collection[str]) -> Found | None:
        """The cached embedding (waiting for a fill under way), or None."""
        fill = self._fills.get(key)
        if fill is not None:
            return await asyncio.shield(fill)
        return await self.tier.get(key, partial(_loads, names))

    async def get_or_compute(
        self,
        key: CacheKey,
        names: Collection[str],
        compute: Callable[[], Awaitable[Embedding]],
    ) -> Found:
        """The cached embedding, or ``compute()``'s, run once per key at a time."""
        fill = self._fills.get(key)
        if fill is None:
            embedding = self.tier.memory_get(key)
            if embedding is not None:
                return embedding, "memory"
            # Registered before the first await, so concurrent callers join it.
            fill = asyncio.ensure_future(self._fill(key, names, compute))
            self._fills[key] = fill
            fill.add_done_callback(lambda done: self._settled(key, done))
        return await asyncio.shield(fill)

    async def aclose(self) -> None:
        """Cancel the fills under way (the lifespan closes Redis)."""
        for fill in list(self._fills.values()):
            fill.cancel()

    async def _fill(
        self,
        key: CacheKey,
        names: Collection[str],
        compute: Callable[[], Awaitable[Embedding]],
    ) -> Found:
        embedding = await self.tier.redis_get(key, partial(_loads, names))
        if embedding is not None:
            self.tier.memory_put(key, embedding)
            return embedding, "redis"
        embedding = await compute()
        await self.tier.put(key, embedding)
        return embedding, "miss"

    def _settled(self, key: CacheKey, fill: asyncio.Task[Found]) -> None:
        self._fills.pop(key, None)
        if not fill.cancelled():
            fill.exception()  # retrieved here: its waiters, if any, re-raise it
