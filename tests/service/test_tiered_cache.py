"""The core's one LRU and its one tiered cache (memory, then a real redis-server):
bounds, eviction order, the codec's keys, and the cooldown after a Redis failure."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from xla_costmodel.service.core.lru import LRU
from xla_costmodel.service.core.redis_store import RedisStore, connect
from xla_costmodel.service.core.tiered import Codec, Rejected, TieredCache

pytestmark = pytest.mark.anyio


class Events:
    """The cache's events, recorded (``CacheEvents``)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, ...]] = []

    def cache_hit(self, level: str) -> None:
        self.seen.append(("hit", level))

    def cache_miss(self, level: str) -> None:
        self.seen.append(("miss", level))

    def cache_error(self, level: str, op: str) -> None:
        self.seen.append(("error", level, op))

    def cache_bypass(self, level: str) -> None:
        self.seen.append(("bypass", level))


def _loads(data: bytes) -> str:
    if not data.startswith(b"v:"):
        raise ValueError("not a test value")
    return data[2:].decode()


CODEC: Codec[str, str] = Codec(
    lambda key: f"test:v1:{key}", lambda v: b"v:" + v.encode(), _loads, "test", "t_"
)


def test_lru_evicts_the_least_recent_past_its_entries() -> None:
    lru: LRU[str, int] = LRU(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # a is now the most recent
    lru.put("c", 3)
    assert "b" not in lru and lru.get("a") == 1 and lru.get("c") == 3
    assert len(lru) == 2 and lru.used == 2
    lru.put("a", 10)  # replacing is not growing
    assert len(lru) == 2 and lru.get("a") == 10


def test_lru_bounded_by_weight_keeps_nothing_heavier_than_itself() -> None:
    lru: LRU[str, bytes] = LRU(10, len)
    lru.put("a", b"1234")
    lru.put("b", b"12345")
    assert lru.used == 9
    lru.put("c", b"12")  # 11 > 10: a, the oldest, goes
    assert "a" not in lru and lru.used == 7
    lru.put("b", b"x" * 11)  # heavier than the whole capacity: not kept, b dropped
    assert "b" not in lru and lru.used == 2 and len(lru) == 1
    lru.put("d", b"123", weight=8)  # the caller's weight, when it knows it
    assert lru.used == 10
    lru.discard("d")
    lru.discard("missing")
    assert lru.used == 2


def test_lru_contains_does_not_refresh() -> None:
    lru: LRU[str, int] = LRU(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert "a" in lru  # looked at, not used
    lru.put("c", 3)
    assert "a" not in lru and "b" in lru


def test_lru_stays_consistent_across_threads() -> None:
    lru: LRU[int, int] = LRU(100)

    def churn(offset: int) -> None:
        for i in range(5_000):
            lru.put(offset + i % 300, i)
            lru.get(offset + (i * 7) % 300)

    threads = [threading.Thread(target=churn, args=(n * 1000,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(lru) == 100 and lru.used == 100


async def test_tiered_cache_reads_memory_then_redis_under_the_codec_key(
    redis_url: str,
) -> None:
    events = Events()
    redis = RedisStore(connect(redis_url, 0.5, 0.5), ttl_s=60, cooldown_s=0)
    writer = TieredCache(LRU(10), redis, CODEC, events, counted=True)
    reader = TieredCache(LRU(10), redis, CODEC, events, counted=True)
    await writer.put("k", "value")
    assert await redis.client.get("test:v1:k") == b"v:value"
    assert 0 < await redis.client.ttl("test:v1:k") <= 60
    assert await writer.get("k") == ("value", "memory")
    assert await reader.get("k") == ("value", "redis")
    assert await reader.get("k") == ("value", "memory")  # kept from Redis
    assert await reader.get("absent") is None
    assert events.seen == [
        ("hit", "memory"),
        ("miss", "memory"),
        ("hit", "redis"),
        ("hit", "memory"),
        ("miss", "memory"),
        ("miss", "redis"),
    ]
    await redis.aclose()


async def test_tiered_cache_refuses_bytes_its_codec_refuses(redis_url: str) -> None:
    events = Events()
    redis = RedisStore(connect(redis_url, 0.5, 0.5), ttl_s=60, cooldown_s=0)
    cache = TieredCache(LRU(10), redis, CODEC, events)
    await redis.set("test:v1:bad", b"garbage")
    await redis.set("test:v1:odd", b"v:odd")

    def picky(data: bytes) -> str:
        raise Rejected("not for this caller", "shape")

    assert await cache.get("bad") is None
    assert await cache.redis_get("odd", picky) is None
    assert await cache.redis_get("odd") == "odd"
    assert not cache.memory_has("odd")  # redis_get reads Redis alone
    assert events.seen == [
        ("error", "redis", "t_decode"),
        ("error", "redis", "t_shape"),
    ]
    await redis.aclose()


async def test_tiered_cache_cools_down_after_a_redis_failure(
    redis_server: Any, redis_url: str
) -> None:
    """A stopped redis-server: one failure, then no Redis calls for the cooldown;
    memory keeps serving and nothing raises."""
    now = [0.0]
    events = Events()
    client = connect(redis_url, 0.2, 0.2)
    redis = RedisStore(client, ttl_s=60, cooldown_s=30, clock=lambda: now[0])
    cache = TieredCache(LRU(10), redis, CODEC, events)
    redis_server.stop()
    try:
        await cache.put("k", "v")  # kept in memory; the SET fails
        assert events.seen == [("error", "redis", "t_set")]
        assert not redis.available
        assert await cache.get("k") == ("v", "memory")
        assert await cache.get("other") is None  # skipped: cooling down
        await cache.redis_set("other", "x")
        assert events.seen[1:] == [("bypass", "redis"), ("bypass", "redis")]
    finally:
        redis_server.start()
    now[0] = 31.0  # the cooldown is over: Redis is tried again
    assert redis.available
    await cache.put("k2", "v2")
    assert await client.get("test:v1:k2") == b"v:v2"
    assert [e for e in events.seen if e[0] == "error"] == [("error", "redis", "t_set")]
    await redis.aclose()


async def test_tiered_cache_without_redis_is_memory_alone() -> None:
    events = Events()
    cache = TieredCache(LRU(1), None, CODEC, events)
    await cache.put("a", "1")
    await cache.put("b", "2")
    assert await cache.get("a") is None and await cache.get("b") == ("2", "memory")
    assert events.seen == []  # not counted, never bypassed
