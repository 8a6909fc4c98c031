"""Measurement generations without a database round trip per rank.

    gens = Generations(bus.trust_s, metrics)
    bus.subscribe(gens.heard)                          build_core
    await gens.current(collection, target, gid, read)  the cached generation, or read()

A generation is what the store answers for a key's measurements (count, newest id:
``MeasurementStore.generation``; ``gid=None``: the whole target's,
``target_generation``). ``current`` answers from memory while the cached value is
trusted (``trust_s``: the event bus's staleness bound, ``event_bus.py``), else
awaits ``read`` (the caller's database query) and caches it.

Entries follow the events (``events.py``): ``MeasurementsWritten`` drops its graph's
and its target's; ``WritersChanged`` (a purge deletes measurements) and ``Missed``
drop them all; a decision alone (``DecisionsWritten``) changes no measurement and
drops nothing. A read that began before an invalidation of its key is returned but
not cached (it may predate the write: ``trusted.py``, which the decision cache uses
too).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple, Protocol

from xla_costmodel.service.core.events import (
    Event,
    MeasurementsWritten,
    Missed,
    Source,
    WritersChanged,
)
from xla_costmodel.service.core.trusted import TrustedCache

Generation = tuple[int, int]  # (count, newest id) of the measurements
# What dropped cached generations: this process's write, another's event, or the
# subscription coming (back) up.
InvalidatedBy = Source


class GenerationKey(NamedTuple):
    """Whose generation: a graph's, or (``graph_id`` None) its whole target's."""

    collection: str
    target: str
    graph_id: str | None


class GenerationEvents(Protocol):
    """What ``Generations`` reports (``service.metrics.stores.GenerationMetrics``)."""

    def generation_lookup(self, hit: bool) -> None: ...
    def generation_invalidated(self, source: InvalidatedBy) -> None: ...


class Generations:
    def __init__(
        self,
        trust_s: Callable[[], float],
        events: GenerationEvents,
        *,
        entries: int = 16_384,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``trust_s``: how long a value read now is trusted (``EventBus.trust_s``)."""
        self.events = events
        self._cache: TrustedCache[GenerationKey, Generation] = TrustedCache(
            entries, trust_s, clock
        )

    def __len__(self) -> int:
        return len(self._cache)

    async def current(
        self,
        collection: str,
        target: str,
        gid: str | None,
        read: Callable[[], Awaitable[Generation]],
    ) -> Generation:
        """The generation of (collection, target, gid): cached while trusted, else
        ``await read()`` (its errors propagate; nothing is cached then)."""
        key = GenerationKey(collection, target, gid)
        value, hit = await self._cache.get(key, read)
        self.events.generation_lookup(hit)
        return value

    def heard(self, event: Event, source: InvalidatedBy) -> None:
        """An event (``EventBus.subscribe``): drop the generations it changed."""
        match event:
            case MeasurementsWritten(collection, target, gid):
                # A graph's write changes its target's generation too.
                self._cache.invalidate(GenerationKey(collection, target, gid))
                self._cache.invalidate(GenerationKey(collection, target, None))
            case WritersChanged() | Missed():
                self._cache.clear()
            case _:
                return  # no measurement changed
        self.events.generation_invalidated(source)
