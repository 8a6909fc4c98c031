"""Each program's servable decisions, per process: no database query per lookup.

    cache = DecisionCache(bus.trust_s)
    bus.subscribe(cache.heard)                                   build_core
    await cache.decisions(DecisionKey.graph(collection, target, graph_id), read)
    await cache.decisions(DecisionKey.fingerprint(collection, target, fp), read)
                                         cached while trusted, else ``await read()``

Two kinds of entry: a graph's decisions, and the decisions stored with one HLO
fingerprint on a target (whatever graphs they name: ``best.py`` pools them).
Entries follow the events (``events.py``): a ``DecisionsWritten`` drops its graph's
entry and every fingerprint entry of its target (a decision of any graph may name
the fingerprint, and the one it replaced may have named another) at once in the
writing process and, through Redis, in every other one; an entry is trusted no
longer than ``EventBus.trust_s`` (``COSTMODEL_FRESHNESS_S`` while no subscription is
live and other processes share the database). What is served depends on the
decisions and their writers only, not on measurements: ``MeasurementsWritten``
drops nothing. A read that began before an invalidation of its key is returned but
not cached: it may predate the write (``trusted.py``, as for the generations).

Revoking or purging a writer is no graph's write: ``costmodel tokens revoke`` and
``measurements purge`` announce it through Redis (``event_bus.announce``), and its
``WritersChanged`` clears every entry in every listening process at once,
fingerprint answers included: the honest decision is served again at once.
Unannounced (the tool not given the service's Redis), its decisions leave the
answers when the entry is next read, at most ``trust_s`` later (60 s).

The cache holds at most ``CACHE_BYTES`` of decisions (``weigh``): a program may
have many writers' decisions, each writer's rows as wide as the collection's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, NamedTuple

from xla_costmodel.service.core.events import (
    DecisionsWritten,
    Event,
    Missed,
    Source,
    WritersChanged,
)
from xla_costmodel.service.core.trusted import TrustedCache
from xla_costmodel.service.store import StoredDecision

Decisions = tuple[StoredDecision, ...]
# What the process keeps of decisions: 32 MiB is ~40,000 xla_cpu decisions (a few
# hundred bytes each) or a few hundred programs' worth of per-node layout rows;
# lookups past it cost one indexed query, as a cold graph does.
CACHE_BYTES = 32 << 20
# A decision's Python objects besides its arrays and options (dataclass, floats,
# strings, datetime): measured ~700 bytes with sys.getsizeof, rounded up.
DECISION_OVERHEAD = 1024
ENTRY_OVERHEAD = 256  # the key, the tuple, the cache's own entry


class DecisionKey(NamedTuple):
    """A program's decisions, of ``collection``'s model, on ``target``: by graph
    id, or by the HLO fingerprint stored with them."""

    collection: str
    target: str
    kind: Literal["graph", "fingerprint"]
    name: str  # the graph id or the fingerprint

    @classmethod
    def graph(cls, collection: str, target: str, graph_id: str) -> DecisionKey:
        return cls(collection, target, "graph", graph_id)

    @classmethod
    def fingerprint(cls, collection: str, target: str, fp: str) -> DecisionKey:
        return cls(collection, target, "fingerprint", fp)


def weigh(decisions: Decisions) -> int:
    """Bytes an entry holds, near enough for a bound."""
    size = ENTRY_OVERHEAD
    for d in decisions:
        size += (
            DECISION_OVERHEAD + d.config.nbytes + len(json.dumps(d.compiler_options))
        )
        if d.refuted_config is not None:
            size += d.refuted_config.nbytes
    return size


class DecisionCache:
    def __init__(
        self,
        trust_s: Callable[[], float],
        capacity_bytes: int = CACHE_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``trust_s``: how long an entry read now is trusted (``EventBus.trust_s``)."""
        self._cache: TrustedCache[DecisionKey, Decisions] = TrustedCache(
            capacity_bytes, trust_s, clock, weigh
        )

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def used_bytes(self) -> int:
        return self._cache.used

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

    def heard(self, event: Event, source: Source) -> None:
        """An event (``EventBus.subscribe``): drop the entries it changed."""
        match event:
            case DecisionsWritten(collection, target, gid):
                self._cache.invalidate(DecisionKey.graph(collection, target, gid))
                where = (collection, target, "fingerprint")
                self._cache.invalidate_where(lambda k: k[:3] == where)
            case WritersChanged() | Missed():
                self._cache.clear()
