"""Values cached while trusted, never one read across a write: the read tracking
that ``generations.py`` (measurement generations) and ``decision_cache.py`` (each
graph's decisions) share.

    cache = TrustedCache(entries, trust_s)
    value, hit = await cache.get(key, read)   from memory while trusted, else read()
    cache.invalidate(key)                     key was written: drop it
    cache.invalidate_where(predicate)         every key it holds for, likewise
    cache.clear()                             anything may have changed

An entry is trusted for ``trust_s()`` seconds (asked at each lookup) after its read
began. A read that began before an invalidation of its key (or a ``clear``) is
returned but not cached: it may predate the write. ``read``'s errors propagate, and
nothing is cached then. At most ``entries`` values are kept (least recent out); with
``weigh``, at most ``entries`` of their weight (bytes, say).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from xla_costmodel.service.core.lru import LRU

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class _Entry(Generic[V]):
    value: V
    read_at: float  # when the read began: the bound runs from there


@dataclass(eq=False)
class _Read:
    """A read under way; ``stale`` once its key was invalidated meanwhile."""

    stale: bool = field(default=False)


class TrustedCache(Generic[K, V]):
    def __init__(
        self,
        entries: int,
        trust_s: Callable[[], float],
        clock: Callable[[], float] = time.monotonic,
        weigh: Callable[[V], int] | None = None,
    ) -> None:
        self.trust_s = trust_s
        self._clock = clock
        self._weigh = weigh
        self._entries: LRU[K, _Entry[V]] = self._empty(entries)
        self._reads: dict[K, set[_Read]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def used(self) -> int:
        """The weight kept (entries, without ``weigh``)."""
        return self._entries.used

    def _empty(self, capacity: int) -> LRU[K, _Entry[V]]:
        weigh = self._weigh
        if weigh is None:
            return LRU(capacity)
        return LRU(capacity, lambda entry: weigh(entry.value))

    async def get(self, key: K, read: Callable[[], Awaitable[V]]) -> tuple[V, bool]:
        """The value of ``key`` and whether it came from memory (trusted), else
        ``await read()`` (cached unless ``key`` was invalidated meanwhile)."""
        now = self._clock()
        entry = self._entries.get(key)
        if entry is not None and now - entry.read_at <= self.trust_s():
            return entry.value, True
        pending = _Read()
        self._reads.setdefault(key, set()).add(pending)
        try:
            value = await read()
        finally:
            reads = self._reads[key]
            reads.discard(pending)
            if not reads:
                del self._reads[key]
        if not pending.stale:
            self._entries.put(key, _Entry(value, now))
        return value, False

    def invalidate(self, key: K) -> None:
        """``key`` was written: drop its entry; reads of it under way stay uncached."""
        self._entries.discard(key)
        for pending in self._reads.get(key, ()):
            pending.stale = True

    def invalidate_where(self, written: Callable[[K], bool]) -> None:
        """Every key for which ``written(key)`` holds was written (kept or being
        read): as ``invalidate`` of each."""
        keys: Iterable[K] = [*self._entries.keys(), *self._reads]
        for key in [k for k in keys if written(k)]:
            self.invalidate(key)

    def clear(self) -> None:
        """Anything may have changed: drop every entry; no read under way is cached."""
        self._entries = self._empty(self._entries.capacity)
        for reads in self._reads.values():
            for pending in reads:
                pending.stale = True
