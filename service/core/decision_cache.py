"""Each graph's servable decisions, per process: no database query per lookup.

    cache = DecisionCache(generations)
    await cache.decisions(key, read)     cached while trusted, else ``await read()``

Entries follow the measurement generations (``generations.py``): storing a decision
is a ``Generations.wrote`` of its graph, which drops the entry here at once in the
writing process and, through the Redis notification, in every other one
(``on_key_change``); an entry is trusted no longer than ``Generations.trust_s``
(``COSTMODEL_FRESHNESS_S`` while no subscription is live and other processes share
the database). A read that began before an invalidation of its key is returned but
not cached: it may predate the write.

Revoking a writer is not a write: its decisions leave the answers when the entry
is next read, at most ``trust_s`` later (60 s with a live subscription).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from xla_costmodel.service.core.generations import Generations
from xla_costmodel.service.core.generations import Key as GenerationKey
from xla_costmodel.service.core.lru import LRU
from xla_costmodel.service.store import StoredDecision

Key = tuple[str, str, str]  # collection, target, graph id
Decisions = tuple[StoredDecision, ...]
ENTRIES = 16_384  # graphs; a few KB each (their decisions' rows)


@dataclass(frozen=True)
class _Entry:
    value: Decisions
    read_at: float  # when the read began: the bound runs from there


@dataclass(eq=False)
class _Read:
    stale: bool = field(default=False)


class DecisionCache:
    def __init__(
        self,
        generations: Generations,
        entries: int = ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.generations = generations
        self._entries: LRU[Key, _Entry] = LRU(entries)
        self._reads: dict[Key, set[_Read]] = {}
        self._clock = clock
        generations.on_key_change(self._changed)

    def __len__(self) -> int:
        return len(self._entries)

    async def decisions(
        self, key: Key, read: Callable[[], Awaitable[Sequence[StoredDecision]]]
    ) -> Decisions:
        """The decisions of ``key``: from memory while trusted, else ``read()`` (its
        errors propagate; nothing is cached then)."""
        now = self._clock()
        entry = self._entries.get(key)
        if entry is not None and now - entry.read_at <= self.generations.trust_s():
            return entry.value
        pending = _Read()
        self._reads.setdefault(key, set()).add(pending)
        try:
            value = tuple(await read())
        finally:
            reads = self._reads[key]
            reads.discard(pending)
            if not reads:
                del self._reads[key]
        if not pending.stale:
            self._entries.put(key, _Entry(value, now))
        return value

    def _changed(self, key: GenerationKey | None) -> None:
        """A write this process learned of (None: anything may have changed)."""
        if key is None:
            self._entries = LRU(self._entries.capacity)
            stale = [p for reads in self._reads.values() for p in reads]
        elif key[2] is None:
            return  # a target's generation: the graph's own key comes with it
        else:
            graph = (key[0], key[1], key[2])
            self._entries.discard(graph)
            stale = list(self._reads.get(graph, ()))
        for pending in stale:
            pending.stale = True
