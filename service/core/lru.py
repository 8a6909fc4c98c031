"""The one bounded LRU of the core: embeddings, graph records, remembered rankings,
adaptation's observations and fits, and the ids of archived graphs.

    LRU(capacity, weigh)    at most ``capacity`` in all, each value weighing
                            ``weigh(value)`` (default 1: an entry-bounded LRU)

Byte-bounded users weigh values in bytes. A value heavier than the whole capacity
is not kept (and replaces nothing). Thread-safe: adaptation's fitters use theirs
from worker threads; an uncontended lock costs less than the dict operations.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _one(_: object) -> int:
    return 1


class LRU(Generic[K, V]):
    """Least-recently-used values, evicted oldest first past ``capacity``."""

    def __init__(self, capacity: int, weigh: Callable[[V], int] = _one) -> None:
        self.capacity = capacity
        self.used = 0  # the weights kept, in all
        self._weigh = weigh
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: K) -> bool:
        """Kept? Without making it recent."""
        return key in self._entries

    def get(self, key: K) -> V | None:
        """The value, now the most recent; None if not kept."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: K, value: V, weight: int | None = None) -> None:
        """Keep ``value`` (``weight``: when the caller knows it already), evicting
        the least recent past the capacity."""
        size = self._weigh(value) if weight is None else weight
        with self._lock:
            self._pop(key)
            if size > self.capacity:
                return
            self._entries[key] = (value, size)
            self.used += size
            while self.used > self.capacity:
                _, (_, evicted) = self._entries.popitem(last=False)
                self.used -= evicted

    def keys(self) -> list[K]:
        """The keys kept, least recent first (a snapshot)."""
        with self._lock:
            return list(self._entries)

    def discard(self, key: K) -> None:
        with self._lock:
            self._pop(key)

    def _pop(self, key: K) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.used -= entry[1]
