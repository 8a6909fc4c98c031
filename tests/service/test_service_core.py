"""The framework-free core: blob codec, memory LRU, Redis store, cache, registry."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from xla_costmodel.harness import add_version
from xla_costmodel.runner import ArtifactRunner, SessionOptions
from xla_costmodel.service.core import blob
from xla_costmodel.service.core.cache import (
    CacheKey,
    EmbeddingCache,
    embedding_memory,
    embedding_nbytes,
)
from xla_costmodel.service.core.inference import KEYED_SORT_MIN, stable_order
from xla_costmodel.service.core.redis_store import CacheUnavailable, RedisStore, connect
from xla_costmodel.service.core.registry import ModelRegistry
from xla_costmodel.service.errors import ModelNotFound, ReloadFailed, VersionNotLoaded

pytestmark = pytest.mark.anyio


class Events:
    """Records what the core reports (the protocols the metrics implement)."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args: self.seen.append((name, *args))

    def count(self, *event: Any) -> int:
        return sum(1 for e in self.seen if e[: len(event)] == event)


def emb(seed: int, nc: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "graph_embedding": rng.normal(size=64).astype(np.float32),
        "node_context": rng.normal(size=(nc, 32)).astype(np.float32),
    }


NAMES = ("graph_embedding", "node_context")


def test_blob_round_trip_is_exact() -> None:
    original = emb(0)
    back = blob.loads(blob.dumps(original))
    assert list(back) == list(original)
    for name in original:
        assert (
            back[name].dtype == np.float32 and back[name].shape == original[name].shape
        )
        np.testing.assert_array_equal(back[name], original[name])


@pytest.mark.parametrize("cut", [0, 5, 12, 40, -4])
def test_blob_rejects_truncated_or_foreign_bytes(cut: int) -> None:
    data = blob.dumps(emb(0))
    with pytest.raises(blob.BlobError):
        blob.loads(data[:cut] if cut else b"\x80\x04pickle")
    with pytest.raises(blob.BlobError):
        blob.loads(data + b"x")


def test_memory_lru_is_bounded_in_bytes() -> None:
    size = embedding_nbytes(emb(0))
    lru = embedding_memory(max_bytes=2 * size + 10)
    lru.put("a", emb(0))
    lru.put("b", emb(1))
    assert lru.get("a") is not None  # a is now the most recent
    lru.put("c", emb(2))
    assert (
        lru.get("b") is None and lru.get("a") is not None and lru.get("c") is not None
    )
    assert lru.used == 2 * size and len(lru) == 2
    lru.put("huge", emb(3, nc=10_000))  # larger than the whole budget: not kept
    assert lru.get("huge") is None and len(lru) == 2


async def test_redis_store_round_trip_ttl_and_outage(
    redis_server: Any, redis_url: str
) -> None:
    store = RedisStore(connect(redis_url, 0.1, 0.1), ttl_s=60, cooldown_s=30)
    await store.set("costmodel:emb:t:1:x", b"v")
    assert await store.get("costmodel:emb:t:1:x") == b"v"
    assert 0 < await store.client.ttl("costmodel:emb:t:1:x") <= 60
    redis_server.stop()
    try:
        with pytest.raises(CacheUnavailable):
            await store.get("costmodel:emb:t:1:x")
        assert not store.available  # cooling down: callers skip Redis
    finally:
        redis_server.start()
        await store.aclose()


async def test_slow_redis_times_out_fast() -> None:
    """A server that accepts but never answers: a short timeout, not a hang."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        store = RedisStore(connect(url, 0.1, 0.1), ttl_s=60, cooldown_s=0)
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(CacheUnavailable):
            await store.get("k")
        assert loop.time() - start < 1.0
        await store.aclose()


async def test_cache_levels_and_single_flight(redis_url: str) -> None:
    events = Events()
    redis = RedisStore(connect(redis_url, 0.2, 0.2), ttl_s=60, cooldown_s=0)
    cache = EmbeddingCache(embedding_memory(1 << 20), redis, events)
    key = CacheKey("layout", "1", "ab" * 32)
    calls = 0

    async def compute() -> dict[str, np.ndarray]:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return emb(7)

    assert await cache.lookup(key, NAMES) is None
    results = await asyncio.gather(
        *(cache.get_or_compute(key, NAMES, compute) for _ in range(8))
    )
    assert calls == 1 and {source for _, source in results} == {"miss"}
    hit = await cache.get_or_compute(key, NAMES, compute)
    assert hit[1] == "memory" and calls == 1
    fresh = EmbeddingCache(
        embedding_memory(1 << 20), redis, events
    )  # a restarted process
    found = await fresh.lookup(key, NAMES)
    assert found is not None and found[1] == "redis"
    np.testing.assert_array_equal(found[0]["node_context"], emb(7)["node_context"])
    other_version = CacheKey("layout", "2", key.graph_id)
    assert await fresh.lookup(other_version, NAMES) is None
    await cache.aclose()
    await redis.aclose()


async def test_cache_treats_a_corrupt_redis_value_as_a_miss(redis_url: str) -> None:
    events = Events()
    redis = RedisStore(connect(redis_url, 0.2, 0.2), ttl_s=60, cooldown_s=0)
    cache = EmbeddingCache(embedding_memory(1 << 20), redis, events)
    key = CacheKey("layout", "1", "cd" * 32)
    await redis.set(key.redis_key, b"garbage")
    assert await cache.lookup(key, NAMES) is None
    assert events.count("cache_error", "redis", "decode") == 1
    await cache.aclose()
    await redis.aclose()


async def test_cache_without_redis_uses_memory_only() -> None:
    cache = EmbeddingCache(embedding_memory(1 << 20), None, Events())
    key = CacheKey("tile", "1", "ef" * 32)

    async def compute() -> dict[str, np.ndarray]:
        return emb(1)

    assert (await cache.get_or_compute(key, NAMES, compute))[1] == "miss"
    assert (await cache.get_or_compute(key, NAMES, compute))[1] == "memory"


async def test_failed_fill_is_not_cached_and_can_be_retried() -> None:
    cache = EmbeddingCache(embedding_memory(1 << 20), None, Events())
    key = CacheKey("tile", "1", "01" * 32)

    async def broken() -> dict[str, np.ndarray]:
        raise RuntimeError("boom")

    async def works() -> dict[str, np.ndarray]:
        return emb(2)

    with pytest.raises(RuntimeError):
        await cache.get_or_compute(key, NAMES, broken)
    assert (await cache.get_or_compute(key, NAMES, works))[1] == "miss"


def registry(model_dir: Path, events: Events, keep: int = 2) -> ModelRegistry:
    return ModelRegistry(model_dir, ["tile", "layout"], SessionOptions(), keep, events)


async def test_registry_loads_reloads_and_pins(model_dir: Path, unet: Any) -> None:
    events = Events()
    reg = registry(model_dir, events)
    await reg.load_all()
    assert reg.ready
    old = reg.get("layout")
    add_version(model_dir, "layout", "2")
    result = await reg.reload("layout")
    assert (result.previous_version, result.version, result.changed) == ("1", "2", True)
    assert reg.get("layout").version == "2" and reg.get("layout", "1") is old
    # A request that took the old runner before the swap finishes on it.
    scores = old.score(old.encode(unet.graph), unet.configs[:4])
    assert scores.shape == (4,)
    assert (await reg.reload("layout")).changed is False
    add_version(model_dir, "layout", "3")
    await reg.reload("layout")
    with pytest.raises(VersionNotLoaded):
        reg.get("layout", "1")  # keep_versions=2: 1 was evicted
    with pytest.raises(ModelNotFound):
        reg.get("nope")


@pytest.mark.parametrize("corrupt", ["truncate", "sha256"])
async def test_registry_keeps_serving_when_a_new_version_is_corrupt(
    model_dir: Path, corrupt: str
) -> None:
    events = Events()
    reg = registry(model_dir, events)
    await reg.load_all()
    add_version(model_dir, "tile", "2", corrupt=corrupt)
    with pytest.raises(ReloadFailed) as info:
        await reg.reload("tile")
    assert "tile/2" in info.value.message
    assert reg.get("tile").version == "1" and reg.ready
    assert events.count("model_reload", "tile", "failed") == 1


async def test_registry_is_not_ready_when_an_artifact_is_missing(
    tmp_path: Path,
) -> None:
    reg = registry(tmp_path, Events())
    await reg.load_all()
    assert not reg.ready
    assert all(slot.error and "no versions" in slot.error for slot in reg.slots())


def test_warm_runner_matches_a_fresh_runner(model_dir: Path, unet: Any) -> None:
    """Sanity for the comparisons below: two sessions on one artifact agree exactly."""
    a = ArtifactRunner(model_dir / "layout" / "1")
    b = ArtifactRunner(model_dir / "layout" / "1")
    ea, eb = a.encode(unet.graph), b.encode(unet.graph)
    np.testing.assert_array_equal(a.score(ea, unet.configs), b.score(eb, unet.configs))


@pytest.mark.parametrize("n", [1, 7, KEYED_SORT_MIN - 1, KEYED_SORT_MIN, 10_000])
def test_stable_order_is_numpys_stable_argsort(n: int) -> None:
    rng = np.random.default_rng(n)
    special = np.array(
        [
            0.0,
            -0.0,
            np.nan,
            -np.nan,
            np.inf,
            -np.inf,
            1.0,
            -1.0,
            3e38,
            -3e38,
            1e-45,
            -1e-45,
        ],
        np.float32,
    )
    for scores in (
        rng.normal(size=n).astype(np.float32),
        np.round(rng.normal(size=n), 1).astype(np.float32),  # many ties
        rng.choice(special, n),
    ):
        order = stable_order(scores)
        assert order.dtype == np.int64
        np.testing.assert_array_equal(order, np.argsort(scores, kind="stable"))
