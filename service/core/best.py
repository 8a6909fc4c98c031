"""The best known decision for a program: what a tuner may reuse without tuning.

    choose(decisions, compiler, min_writers) -> Choice | None    pure: the rule below
    BestLookup.best(query) -> Choice                              NoDecision if none

Among one graph's servable decisions on one target (``store/decisions.py``: not from
revoked writers, nor from writers no longer allowed the target; anonymous ones count
as one writer):

1. only configs that at least ``min_writers`` distinct writers decided, under one
   compiler, are considered;
2. the decisions under the asked compiler, if there are any; otherwise those under
   the freshest compiler (that of the most recent decision), answered ``stale``
   when a compiler was asked: the config was measured under another build;
3. the one with the highest ``speedup_low`` (the speedup it is confidently worth);
   ties: the config more writers decided, then the newest decision.

Lookups of a known graph send no database statement (``decision_cache.py``). A
program named by its HLO fingerprint (``jit``: hashing is cheaper than featurizing)
is the graph of the newest decision stored with that fingerprint; the mapping never
changes once found, so it is kept in memory and a known fingerprint costs nothing
more.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.decision_cache import DecisionCache, DecisionKey
from xla_costmodel.service.core.errors import DecisionsUnavailable, NoDecision
from xla_costmodel.service.core.lru import LRU
from xla_costmodel.service.core.registry import ModelRegistry
from xla_costmodel.service.store import StoredDecision, StoreUnavailable

LookupResult = Literal["hit", "miss", "stale"]
FINGERPRINTS = 16_384  # (collection, target, fingerprint) -> graph id, in memory
Fingerprint = tuple[str, str, str]  # collection, target, HLO fingerprint


class BestEvents(Protocol):
    """What lookups report (``xla_costmodel.service.metrics.tuning.BestMetrics``)."""

    def best_lookup(self, target: str, result: LookupResult) -> None: ...
    def store_error(self, op: str) -> None: ...


@dataclass(frozen=True)
class BestQuery:
    """A program named by ``graph_id`` or by ``hlo_fingerprint`` (exactly one)."""

    model: str
    graph_id: str | None
    target: str | None = None  # default: the model's
    compiler: str | None = None  # None: any (the freshest compiler's)
    min_writers: int = 1
    hlo_fingerprint: str | None = None


@dataclass(frozen=True)
class Choice:
    decision: StoredDecision
    target: str
    writers: int  # distinct writers that decided its config under its compiler
    stale: bool  # decided under another compiler than the one asked
    graph_id: str  # the program's (asked, or found by its HLO fingerprint)


def choose(
    decisions: Sequence[StoredDecision], compiler: str | None, min_writers: int
) -> tuple[StoredDecision, int, bool] | None:
    """(decision, writers, stale) by the module's rule; None when nothing qualifies."""
    writers: dict[tuple[object, ...], set[str | None]] = defaultdict(set)
    for d in decisions:
        writers[_config_key(d)].add(d.writer)

    def count(d: StoredDecision) -> int:
        return len(writers[_config_key(d)])

    qualified = [d for d in decisions if count(d) >= min_writers]
    if not qualified:
        return None
    pool = [d for d in qualified if compiler is not None and d.compiler == compiler]
    if not pool:
        freshest = max(qualified, key=lambda d: (d.decided_at, d.id)).compiler
        pool = [d for d in qualified if d.compiler == freshest]
    best = max(pool, key=lambda d: (d.speedup_low, count(d), d.decided_at, d.id))
    return best, count(best), compiler is not None and best.compiler != compiler


def _config_key(d: StoredDecision) -> tuple[object, ...]:
    # The decoded float32 row: one config stored in two dtypes is one config.
    return (d.compiler, d.config.shape, d.config.tobytes())


class BestLookup:
    def __init__(
        self,
        registry: ModelRegistry,
        db: Database,
        cache: DecisionCache,
        events: BestEvents,
    ) -> None:
        self.registry = registry
        self.db = db
        self.cache = cache
        self.events = events
        self._graphs: LRU[Fingerprint, str] = LRU(FINGERPRINTS)

    async def best(self, query: BestQuery) -> Choice:
        """The decision to reuse for ``query``'s graph; ``NoDecision`` if none."""
        runner = self.registry.get(query.model)
        target = query.target or runner.manifest.target
        gid = query.graph_id or await self._graph_of(
            (runner.collection, target, query.hlo_fingerprint or "")
        )
        key = DecisionKey(runner.collection, target, gid or "")
        found = (
            None
            if gid is None
            else choose(await self._decisions(key), query.compiler, query.min_writers)
        )
        if found is None:
            self.events.best_lookup(target, "miss")
            name = "graph_id" if query.graph_id else "hlo_fingerprint"
            raise NoDecision(
                f"no decision for {name} {query.graph_id or query.hlo_fingerprint} "
                f"on target {target!r}"
                + (f" by {query.min_writers}+ writers" if query.min_writers > 1 else "")
                + ": tune it (and POST /v1/decisions)",
                name,
            )
        decision, writers, stale = found
        self.events.best_lookup(target, "stale" if stale else "hit")
        return Choice(decision, target, writers, stale, key.graph_id)

    async def _graph_of(self, fingerprint: Fingerprint) -> str | None:
        """The graph a fingerprint names (kept once found: it never changes)."""
        known = self._graphs.get(fingerprint)
        if known is not None:
            return known
        try:
            found = await self.db.run(lambda s: s.decisions.graph_of(*fingerprint))
        except StoreUnavailable:
            self.events.store_error("read_decisions")
            raise DecisionsUnavailable(
                "decisions not read: the measurement database is unavailable; "
                "retry later"
            ) from None
        if found is not None:
            self._graphs.put(fingerprint, found)
        return found

    async def _decisions(self, key: DecisionKey) -> Sequence[StoredDecision]:
        async def read() -> list[StoredDecision]:
            return await self.db.run(lambda s: s.decisions.for_graph(*key))

        try:
            return await self.cache.decisions(key, read)
        except StoreUnavailable:
            self.events.store_error("read_decisions")
            raise DecisionsUnavailable(
                "decisions not read: the measurement database is unavailable; "
                "retry later"
            ) from None
