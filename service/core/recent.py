"""Remembered rankings: the configs and scores of the latest rank request per (model,
version, graph_id), so feedback may name configs by index.

    RecentRankings.remember(key, configs, scores)
    RecentRankings.recall(key) -> (configs, scores) | None

With Redis configured they live under ``costmodel:recent:v1:<model>:<version>:<gid>``
(raw arrays behind a small JSON header, nothing pickled), so feedback reaching
another worker or replica than the ranking finds them, and Redis is read first:
another worker may have ranked the graph more recently than this one. The in-process
LRU is the fallback for no Redis, a Redis failure (a miss, a log line and a metric,
never an error) and batches too large to share; a batch Redis did not take is
marked, and recalled from memory before Redis, since Redis holds an older one at
best. Best-effort either way.
"""

from __future__ import annotations

import json
import logging
import struct
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from xla_costmodel.service.core.memory import MemoryLRU
from xla_costmodel.service.core.redis_store import (
    RedisStore,
    StoreUnavailable,
    recent_key,
)

if TYPE_CHECKING:
    from xla_costmodel.service.core.cache import CacheEvents

log = logging.getLogger(__name__)
Key = tuple[str, str, str]  # model, version, graph_id
Scored = tuple[np.ndarray[Any, Any], npt.NDArray[np.float32]]
# Feedback follows its ranking within minutes to hours (an autotuner measures, then
# reports); a day bounds what Redis holds for rankings nobody reports on.
TTL_S = 24 * 3600
LOCAL = "local"  # marks a memory entry that Redis does not hold
MAGIC = b"CMRANK1\n"
_LEN = struct.Struct("<I")
# Config dtypes as ``check_configs`` passes them on (int8 layout batches, floats).
DTYPES = frozenset({"|i1", "<i2", "<i4", "<i8", "<f4", "<f8"})


class RecentRankings:
    def __init__(
        self,
        max_bytes: int,
        redis: RedisStore | None,
        events: CacheEvents,
        shared_bytes: int = 8 << 20,
    ) -> None:
        self.memory = MemoryLRU(max_bytes)
        self.redis = redis
        self.events = events
        # Larger batches stay in this process: a SET much larger would not fit the
        # client's short socket timeout. A 1,965-config layout batch (int8) is 2.2 MB.
        self.shared_bytes = shared_bytes

    async def remember(
        self, key: Key, configs: np.ndarray[Any, Any], scores: npt.NDArray[np.float32]
    ) -> None:
        entry = {"c": configs, "s": scores}
        self.memory.put(key, entry)
        if self.redis is None or self.memory.max_bytes == 0:
            return
        size = configs.nbytes + scores.nbytes
        shareable = size <= min(self.shared_bytes, self.memory.max_bytes) and (
            configs.dtype.newbyteorder("<").str in DTYPES
        )
        try:
            if not self.redis.available:  # cooling down after a failure
                shareable = False
            elif shareable:
                blob = dumps(configs, scores)
                await self.redis.set(recent_key(*key), blob, ttl_s=TTL_S)
            else:  # an older batch in Redis must not answer for this one elsewhere
                await self.redis.delete(recent_key(*key))
        except StoreUnavailable as exc:
            shareable = False
            self._failed("recent_set", key, exc)
        if not shareable:
            # Here this batch is newer than whatever Redis holds: recall prefers it.
            # (An empty marker array: it is evicted with its entry, costs no bytes.)
            self.memory.put(key, {**entry, LOCAL: np.empty(0, np.int8)})

    async def recall(self, key: Key) -> Scored | None:
        found = self.memory.get(key)
        if found is None or LOCAL not in found:
            shared = await self._from_redis(key)
            if shared is not None:
                return shared
        return None if found is None else (found["c"], found["s"])

    async def _from_redis(self, key: Key) -> Scored | None:
        if self.redis is None or not self.redis.available:
            return None
        try:
            value = await self.redis.get(recent_key(*key))
            return None if value is None else loads(value)
        except StoreUnavailable as exc:
            self._failed("recent_get", key, exc)
        except ValueError as exc:
            self._failed("recent_decode", key, exc)
        return None

    def _failed(self, op: str, key: Key, exc: Exception) -> None:
        self.events.cache_error("redis", op)
        log.warning(
            "remembered ranking %s failed; using this process's memory",
            op,
            extra={"cache_key": recent_key(*key), "error": str(exc)},
        )


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
