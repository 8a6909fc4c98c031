"""Remembered rankings: the configs and scores of each rank answer, per (model,
version, graph_id, ranking_id), so feedback may name configs by index into the
answer it means.

    RecentRankings.remember(key, configs, scores, client)
    RecentRankings.recall(key) -> (configs, scores) | None

Each client (``core/clients.py``: the writer its token authenticates, else its
address) may hold ``client_bytes`` of the in-process LRU: past that its own oldest
batches go, so one client's churn of 8 MiB batches cannot evict every tuner's.

Every answer has its own ``ranking_id`` (``new_ranking_id``: the time it was issued,
then 80 random bits), so two tuners ranking the same graph never read each other's
batch. With Redis configured a batch also lives under
``costmodel:recent:v2:<model>:<version>:<gid>:<ranking_id>`` (raw arrays behind a
small JSON header, nothing pickled), so feedback reaching another worker or replica
than the ranking finds it. A key names one batch forever, so memory is read first
and Redis second (``xla_costmodel.service.core.tiered``). The in-process LRU alone
serves no Redis, a Redis failure (a miss, a log line and a metric, never an error)
and batches too large to share.

The rank answer does not wait for Redis: ``remember`` keeps the batch in memory and
queues its SET for one background task, which writes whatever has queued in one
pipeline per round trip (``aclose`` lets it finish). So a
feedback that reaches another process right after the answer may ask Redis before
the SET landed: ``recall`` of a ranking issued less than ``WRITE_GRACE_S`` ago polls
Redis until then, and the ``ranking_id`` is valid as soon as the answer is sent.
Best-effort either way: an evicted or expired one is 409 ``ranking_not_found``.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import struct
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from xla_costmodel.service.core.lru import LRU
from xla_costmodel.service.core.redis_store import RedisStore, recent_key
from xla_costmodel.service.core.tiered import CacheEvents, Codec, TieredCache


class RankingKey(NamedTuple):
    """Names one rank answer's batch (in Redis under ``recent_key(*key)``: the
    fields in this order)."""

    model: str
    version: str
    graph_id: str
    ranking_id: str


Scored = tuple[np.ndarray[Any, Any], npt.NDArray[np.float32]]
# Feedback follows its ranking within minutes to hours (an autotuner measures, then
# reports); a day bounds what Redis holds for rankings nobody reports on.
TTL_S = 24 * 3600
MAGIC = b"CMRANK1\n"
_LEN = struct.Struct("<I")
# Config dtypes as ``check_configs`` passes them on (int8 layout batches, floats).
DTYPES = frozenset({"|i1", "<i2", "<i4", "<i8", "<f4", "<f8"})
ENTRY_OVERHEAD = 512  # tuple, key and array headers, on top of the array data
# A background SET lands within a Redis round trip (the client's socket timeout is
# 0.1 s by default); a feedback for a younger ranking that misses polls this long.
WRITE_GRACE_S = 0.5
POLL_S = 0.005  # the first wait; each next one doubles
MAX_POLLS = 8  # 5 ms doubling covers the grace in 7 waits


def new_ranking_id(now_s: float | None = None) -> str:
    """32 hex digits: milliseconds since the epoch (12), then 80 random bits."""
    ms = int((time.time() if now_s is None else now_s) * 1000)
    return f"{ms & 0xFFFFFFFFFFFF:012x}{secrets.token_hex(10)}"


def issued_s(ranking_id: str) -> float | None:
    """When ``new_ranking_id`` issued this id (seconds since the epoch), if it did."""
    try:
        return int(ranking_id[:12], 16) / 1000
    except ValueError:
        return None


def _weigh(scored: Scored) -> int:
    configs, scores = scored
    return ENTRY_OVERHEAD + configs.nbytes + scores.nbytes


def _key(key: RankingKey) -> str:
    return recent_key(*key)


def _dumps(scored: Scored) -> bytes:
    return dumps(*scored)


class RecentRankings:
    def __init__(
        self,
        max_bytes: int,
        redis: RedisStore | None,
        events: CacheEvents,
        shared_bytes: int = 8 << 20,
        client_bytes: int = 16 << 20,
    ) -> None:
        codec = Codec(
            _key, _dumps, loads, "remembered ranking", ops="recent_", kind="ranking"
        )
        memory: LRU[RankingKey, Scored] = LRU(max_bytes, _weigh)
        self.tier = TieredCache(memory, redis, codec, events)
        self.max_bytes = max_bytes
        # Larger batches stay in this process: a SET much larger would not fit the
        # client's short socket timeout. A 1,965-config layout batch (int8) is 2.2 MB.
        self.shared_bytes = shared_bytes
        # Batches waiting for Redis, and the one task writing them: under load the
        # SETs of several answers share one round trip (a pipeline).
        self._queue: list[tuple[RankingKey, Scored]] = []
        self._writer: asyncio.Task[None] | None = None
        self.budgets = ClientBudgets(memory, client_bytes)

    @property
    def shared(self) -> bool:
        """Whether batches are shared through Redis (else memory only)."""
        return self.tier.redis is not None

    def remember(
        self,
        key: RankingKey,
        configs: np.ndarray[Any, Any],
        scores: npt.NDArray[np.float32],
        client: str = "",
    ) -> None:
        """Keep the batch here now (within ``client``'s budget); share it through
        Redis in the background."""
        self.tier.memory_put(key, (configs, scores))
        self.budgets.charge(client, key, _weigh((configs, scores)))
        size = configs.nbytes + scores.nbytes
        shareable = size <= min(self.shared_bytes, self.max_bytes) and (
            configs.dtype.newbyteorder("<").str in DTYPES
        )
        if self.shared and shareable:  # else too big (or remembering is off)
            self._queue.append((key, (configs, scores)))
            if self._writer is None:
                self._writer = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                await self.tier.redis_set_many(batch, ttl_s=TTL_S)
        finally:
            self._writer = None

    async def recall(self, key: RankingKey) -> Scored | None:
        # A key names one batch forever: memory first, then Redis.
        found = await self.tier.get(key)
        if found is None and self.shared:
            # Its SET may still be on its way from the process that answered: wait
            # out what is left of its grace (never longer, whatever the id says).
            issued = issued_s(key[3])
            age = WRITE_GRACE_S if issued is None else time.time() - issued
            if abs(age) > WRITE_GRACE_S:  # long landed, or not an id issued here
                age = WRITE_GRACE_S
            deadline = time.monotonic() + WRITE_GRACE_S - max(age, 0)
            # Doubling waits: anyone can send a fresh-looking id, and each costs at
            # most ``MAX_POLLS`` GETs (a fixed step would be ~100).
            wait, polls = POLL_S, 0
            while found is None and polls < MAX_POLLS:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                await asyncio.sleep(min(wait, left))
                found = await self.tier.get(key)
                wait, polls = 2 * wait, polls + 1
        return None if found is None else found[0]

    async def aclose(self) -> None:
        """Let the SETs in flight finish (before Redis closes)."""
        while self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)


@dataclass
class _Book:
    batches: OrderedDict[RankingKey, int] = field(default_factory=OrderedDict)
    used: int = 0


class ClientBudgets:
    """Per client, the batches it put in ``memory``, oldest first: past ``limit``
    bytes its oldest leave ``memory`` (a batch over the whole limit is not kept).
    Entries of batches the LRU evicted first are dropped as they come up; at most
    ``clients`` books are kept (the least recent client's goes, its batches left to
    the LRU)."""

    def __init__(
        self, memory: LRU[RankingKey, Scored], limit: int, clients: int = 65_536
    ) -> None:
        self.memory = memory
        self.limit = limit
        self._books: LRU[str, _Book] = LRU(clients)
        self._lock = threading.Lock()

    def charge(self, client: str, key: RankingKey, size: int) -> None:
        with self._lock:
            book = self._books.get(client)
            if book is None:
                book = _Book()
                self._books.put(client, book)
            book.batches[key] = size
            book.used += size
            while book.batches and (
                book.used > self.limit or next(iter(book.batches)) not in self.memory
            ):
                old, weight = book.batches.popitem(last=False)
                book.used -= weight
                self.memory.discard(old)

    def used(self, client: str) -> int:
        """The bytes ``client``'s batches are charged (for tests and metrics)."""
        book = self._books.get(client)
        return 0 if book is None else book.used


def dumps(configs: np.ndarray[Any, Any], scores: npt.NDArray[np.float32]) -> bytes:
    """``MAGIC``, uint32 header length, JSON header, configs' bytes, scores' bytes.

    Raw bytes, not an npz: writing and reading a 2 MB batch through ``np.savez`` cost
    ~3 ms each way here, a plain copy ~0.3 ms, on every rank request."""
    c = np.ascontiguousarray(configs, dtype=configs.dtype.newbyteorder("<"))
    if c.dtype.str not in DTYPES:
        raise ValueError(f"configs of dtype {c.dtype} are not remembered in Redis")
    header = json.dumps({"dtype": c.dtype.str, "shape": list(c.shape)}).encode()
    s = np.ascontiguousarray(scores, dtype="<f4")
    return b"".join([MAGIC, _LEN.pack(len(header)), header, c.tobytes(), s.tobytes()])


def loads(value: bytes) -> Scored:
    """Raises ValueError for anything but what ``dumps`` wrote."""
    start = len(MAGIC) + _LEN.size
    if not value.startswith(MAGIC) or len(value) < start:
        raise ValueError("not a remembered ranking")
    (size,) = _LEN.unpack_from(value, len(MAGIC))
    try:
        header = json.loads(value[start : start + size])
        dtype, shape = np.dtype(header["dtype"]), tuple(int(d) for d in header["shape"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"not a remembered ranking: bad header: {exc}") from None
    if dtype.str not in DTYPES or not shape or min(shape) < 0:
        raise ValueError("not a remembered ranking: bad header")
    offset = start + size
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(value) != offset + nbytes + 4 * shape[0]:
        raise ValueError("not a remembered ranking: wrong length")
    configs = np.frombuffer(value, dtype, int(np.prod(shape)), offset).reshape(shape)
    scores = np.frombuffer(value, "<f4", shape[0], offset + nbytes)
    return configs, scores
