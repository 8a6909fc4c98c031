"""Remembered rankings shared through a real redis-server: what one process ranked,
another recalls by its ranking id; two rankings of one graph never stand in for each
other; Redis failures fall back to memory and are counted, never raised."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import numpy as np
import pytest

from xla_costmodel.harness import free_port
from xla_costmodel.service.core import recent
from xla_costmodel.service.core.recent import RankingKey, RecentRankings
from xla_costmodel.service.core.redis_store import RedisStore, connect, recent_key

pytestmark = pytest.mark.anyio
KEY = RankingKey("tile", "1", "g" * 64, "a" * 32)
OTHER = RankingKey("tile", "1", "g" * 64, "b" * 32)  # another answer for the same graph
MiB = 1 << 20


class Events:
    """The cache's events, recorded (``CacheEvents``)."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def cache_hit(self, level: str) -> None: ...
    def cache_miss(self, level: str) -> None: ...
    def cache_bypass(self, level: str) -> None: ...

    def cache_error(self, level: str, op: str) -> None:
        self.errors.append(op)


@pytest.fixture
async def stores(redis_url: str) -> AsyncIterator[list[RedisStore]]:
    """Two clients of one redis-server: two workers' views."""
    opened = [
        RedisStore(connect(redis_url, 1.0, 1.0), ttl_s=60, cooldown_s=0)
        for _ in range(2)
    ]
    yield opened
    for store in opened:
        await store.aclose()


def batch(n: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    configs = np.arange(start, start + n * 24, dtype=np.int8).reshape(n, 24)
    return configs, np.linspace(0, 1, n, dtype=np.float32)


async def test_a_ranking_remembered_by_one_worker_is_recalled_by_another(
    stores: list[RedisStore],
) -> None:
    a, b = (RecentRankings(MiB, store, Events()) for store in stores)
    assert await b.recall(KEY) is None
    older, newer = batch(5), batch(7, start=3)
    b.remember(KEY, *older)
    a.remember(OTHER, *newer)
    await a.aclose(), await b.aclose()  # the background SETs landed
    for worker in (a, b):  # each id names its own batch, wherever it is recalled
        for key, want in ((KEY, older), (OTHER, newer)):
            found = await worker.recall(key)
            assert found is not None
            assert found[0].dtype == np.int8 and np.array_equal(found[0], want[0])
            assert np.array_equal(found[1], want[1])
    assert 0 < await stores[0].client.ttl(recent_key(*KEY)) <= recent.TTL_S


async def test_a_batch_too_large_to_share_stays_with_its_worker(
    stores: list[RedisStore],
) -> None:
    a, b = (RecentRankings(MiB, store, Events(), 200) for store in stores)
    b.remember(KEY, *batch(5))
    large = batch(50)
    a.remember(OTHER, *large)
    await a.aclose(), await b.aclose()
    found = await a.recall(OTHER)
    assert found is not None and np.array_equal(found[0], large[0])
    assert await stores[0].client.exists(recent_key(*OTHER)) == 0
    assert await b.recall(OTHER) is None  # not shared, and never another batch
    found = await a.recall(KEY)  # the small one is, through Redis
    assert found is not None and len(found[1]) == 5


async def test_redis_failures_fall_back_to_memory(stores: list[RedisStore]) -> None:
    events = Events()
    worker, other = (RecentRankings(MiB, store, events) for store in stores)
    configs, scores = batch(4)
    worker.remember(KEY, configs, scores)
    await worker.aclose()
    await stores[1].client.set(recent_key(*KEY), b"not an npz")
    found = await worker.recall(KEY)  # its own memory first: no Redis read
    assert found is not None and np.array_equal(found[0], configs)
    assert await other.recall(KEY) is None  # a corrupt value is a miss, counted
    down = RedisStore(connect(f"redis://127.0.0.1:{free_port()}", 0.2, 0.2), 60, 0)
    offline = RecentRankings(MiB, down, events)
    offline.remember(KEY, configs, scores)
    await offline.aclose()
    found = await offline.recall(KEY)
    assert found is not None and np.array_equal(found[1], scores)
    await down.aclose()
    assert events.errors == ["recent_decode", "recent_set"]


async def test_no_room_means_nothing_is_remembered(stores: list[RedisStore]) -> None:
    a, b = (RecentRankings(0, store, Events()) for store in stores)
    a.remember(KEY, *batch(3))
    await a.aclose()
    assert await a.recall(KEY) is None and await b.recall(KEY) is None


async def test_a_fresh_ranking_id_is_valid_before_its_set_lands(
    stores: list[RedisStore],
) -> None:
    """The answer does not wait for Redis: a feedback reaching another worker at once
    waits out the SET; an id nobody remembered answers None within the grace."""
    a, b = (RecentRankings(MiB, store, Events()) for store in stores)
    key = RankingKey("tile", "1", "g" * 64, recent.new_ranking_id())
    a.remember(key, *batch(6))  # no await: the SET is a background task
    found = await b.recall(key)
    assert found is not None and len(found[1]) == 6
    unknown = RankingKey("tile", "1", "g" * 64, recent.new_ranking_id())
    start = time.monotonic()
    assert await b.recall(unknown) is None
    assert time.monotonic() - start <= recent.WRITE_GRACE_S + 0.2
    old = RankingKey("tile", "1", "g" * 64, recent.new_ranking_id(time.time() - 60))
    start = time.monotonic()
    assert await b.recall(old) is None
    # Long landed, or never: no waiting (well under the grace a fresh id gets).
    assert time.monotonic() - start < recent.WRITE_GRACE_S / 2
    await a.aclose()


def test_ranking_ids_carry_their_issue_time() -> None:
    now = time.time()
    ids = {recent.new_ranking_id(now) for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 32 for i in ids)
    for i in ids:
        issued = recent.issued_s(i)
        assert issued is not None and abs(issued - now) < 0.002
    assert recent.issued_s("z" * 32) is None


@pytest.mark.parametrize(
    "value",
    [b"PK\x03\x04 an npz", recent.dumps(*batch(3))[:-10], recent.MAGIC + b"\xff" * 8],
)
def test_loads_refuses_what_dumps_did_not_write(value: bytes) -> None:
    with pytest.raises(ValueError, match="not a remembered ranking"):
        recent.loads(value)


@pytest.mark.parametrize("dtype", ["|i1", "<f4", ">f4", "<i8"])
def test_dumps_and_loads_keep_the_batch_as_sent(dtype: str) -> None:
    configs = np.arange(5 * 3 * 4).reshape(5, 3, 4).astype(dtype)
    scores = np.linspace(-1, 1, 5, dtype=np.float32)
    back_configs, back_scores = recent.loads(recent.dumps(configs, scores))
    assert back_configs.dtype == np.dtype(dtype).newbyteorder("<")
    assert np.array_equal(back_configs, configs)
    assert np.array_equal(back_scores, scores)


async def test_batches_queued_together_all_reach_redis(
    stores: list[RedisStore],
) -> None:
    """Answers remembered in one go share the background writer's pipeline; every
    batch lands, and another worker recalls each by its own id."""
    a, b = (RecentRankings(MiB, store, Events()) for store in stores)
    keys = [
        RankingKey("tile", "1", "g" * 64, recent.new_ranking_id()) for _ in range(20)
    ]
    for n, key in enumerate(keys):
        a.remember(key, *batch(n + 1))
    await a.aclose()
    for n, key in enumerate(keys):
        assert await stores[0].client.exists(recent_key(*key)) == 1
        found = await b.recall(key)
        assert found is not None and len(found[1]) == n + 1
