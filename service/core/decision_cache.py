"""Each graph's servable decisions, per process: no database query per lookup.

    cache = DecisionCache(generations)
    await cache.decisions(DecisionKey(collection, target, graph_id), read)
                                         cached while trusted, else ``await read()``

Entries follow the measurement generations (``generations.py``): storing a decision
is a ``Generations.wrote`` of its graph, which drops the entry here at once in the
writing process and, through the Redis notification, in every other one
(``on_key_change``); an entry is trusted no longer than ``Generations.trust_s``
(``COSTMODEL_FRESHNESS_S`` while no subscription is live and other processes share
the database). A read that began before an invalidation of its key is returned but
not cached: it may predate the write (``trusted.py``, as for the generations).

Revoking or purging a writer is no graph's write: ``costmodel tokens revoke`` and
``measurements purge`` announce it through Redis (``generations.announce``), which
clears every entry in every subscribed process at once (``on_key_change`` with
None). Unannounced (the tool not given the service's Redis), its decisions leave
the answers when the entry is next read, at most ``trust_s`` later (60 s).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

from xla_costmodel.service.core.generations import GenerationKey, Generations
from xla_costmodel.service.core.trusted import TrustedCache
from xla_costmodel.service.store import StoredDecision

Decisions = tuple[StoredDecision, ...]
ENTRIES = 16_384  # graphs; a few KB each (their decisions' rows)


class DecisionKey(NamedTuple):
    """A graph's decisions: of ``collection``'s model, on ``target``."""

    collection: str
    target: str
    graph_id: str


class DecisionCache:
    def __init__(
        self,
        generations: Generations,
        entries: int = ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.generations = generations
        self._cache: TrustedCache[DecisionKey, Decisions] = TrustedCache(
            entries, generations.trust_s, clock
        )
        generations.on_key_change(self._changed)

    def __len__(self) -> int:
        return len(self._cache)

    async def decisions(
        self,
        key: DecisionKey,
        read: Callable[[], Awaitable[Sequence[StoredDecision]]],
    ) -> Decisions:
        """The decisions of ``key``: from memory while trusted, else ``read()`` (its
        errors propagate; nothing is cached then)."""

        async def rows() -> Decisions:
            return tuple(await read())

        value, _ = await self._cache.get(key, rows)
        return value

    def _changed(self, key: GenerationKey | None) -> None:
        """A write this process learned of (None: anything may have changed)."""
        if key is None:
            self._cache.clear()
        elif key.graph_id is not None:  # a target's: the graph's own comes with it
            self._cache.invalidate(
                DecisionKey(key.collection, key.target, key.graph_id)
            )
