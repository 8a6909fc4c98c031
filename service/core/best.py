"""The best known decision for a program: what a tuner (or ``jit``) may reuse.

    choose(decisions, compiler, min_writers) -> Ruling | None    pure: the rule below
    BestLookup.best(query) -> Choice                              NoDecision if none

The rule (docs/reuse.md, "What the fleet applies"), over a program's servable
decisions on one target (``store/decisions.py``: not from revoked writers, nor from
writers no longer allowed the target; anonymous ones only while the server accepts
anonymous writes; rows the collection refuses as decisions never):

1. per compiler: the asked compiler's decisions if a row is served under it, else
   those of the freshest compiler that serves one (answered ``stale`` when a
   compiler was asked: the row was measured under another build);
2. each writer counts once, by its newest decision (anonymous ones: one writer);
3. for each exact row r: its supporters are the writers whose decision is r, kept
   as the default or measured faster (``p_value <= ALPHA`` and ``speedup > 1``);
   its opposers those whose decision refutes r as "slower", or is r measured
   slower (``speedup_high < 1``); any writer that refuted r as "outputs" vetoes it;
4. r is served only with ``votes = supporters - opposers >= 1``, at least
   ``min_writers`` supporters, and no veto; the best is the max by (votes, median
   of its supporters' ``speedup_low``, newest supporter). The answer is the
   supporter decision with the (lower) median ``speedup_low``; ``writers`` counts
   the supporters.

So one writer makes ``jit`` apply a row only if it measured the row faster itself
and no row has more net votes; another writer's verification that shows it slower
cancels it, and any output-mismatch report removes it.

A program is named by graph id or by the HLO fingerprint ``jit`` sends (hashing is
cheaper than featurizing): then every decision stored with that fingerprint on the
target is pooled, whatever graph it names, by the same rule. Both kinds of lookup
are cached (``decision_cache.py``): a known program costs no database statement.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

import numpy as np

from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.decision_cache import DecisionCache, DecisionKey
from xla_costmodel.service.core.errors import DecisionsUnavailable, NoDecision
from xla_costmodel.service.core.registry import ModelRegistry
from xla_costmodel.service.store import StoredDecision, StoreUnavailable
from xla_costmodel.tpugraphs.collections import CollectionSpec, get
from xla_costmodel.tpugraphs.paired import ALPHA

LookupResult = Literal["hit", "miss", "stale"]
Row = tuple[tuple[int, ...], bytes]  # an exact row: shape, float32 bytes


class BestEvents(Protocol):
    """What lookups report (``xla_costmodel.service.metrics.tuning.BestMetrics``)."""

    def best_lookup(self, target: str, result: LookupResult) -> None: ...
    def store_error(self, op: str) -> None: ...


@dataclass(frozen=True, kw_only=True)
class BestQuery:
    """A program named by ``graph_id`` or by ``hlo_fingerprint`` (exactly one)."""

    model: str
    graph_id: str | None = None
    hlo_fingerprint: str | None = None
    target: str | None = None  # default: the model's
    compiler: str | None = None  # None: any (the freshest compiler's)
    min_writers: int = 1
    # Whether anonymous decisions count: only while the server accepts anonymous
    # writes (``FeedbackAuth.anonymous_open``).
    anonymous: bool = False


@dataclass(frozen=True, kw_only=True)
class Ruling:
    decision: StoredDecision  # the supporter with the (lower) median speedup_low
    writers: int  # its row's supporters
    stale: bool  # decided under another compiler than the one asked


@dataclass(frozen=True, kw_only=True)
class Choice:
    decision: StoredDecision
    target: str
    writers: int
    stale: bool
    graph_id: str  # the answered decision's (asked, or found by fingerprint)
    compiler_options: dict[str, Any]  # derived from the row

    # The answered decision's own fields, by name: ``GET /v1/best``'s answer is
    # built from the choice by attribute (``BestOut.model_validate``).
    @property
    def config(self) -> list[Any]:
        return list(self.decision.config.tolist())

    @property
    def speedup(self) -> float:
        return self.decision.speedup

    @property
    def speedup_low(self) -> float:
        return self.decision.speedup_low

    @property
    def p_value(self) -> float | None:
        return self.decision.p_value

    @property
    def decided_at(self) -> datetime:
        return self.decision.decided_at

    @property
    def compiler(self) -> str | None:
        return self.decision.compiler

    @property
    def model(self) -> str:
        return self.decision.model

    @property
    def kept_default(self) -> bool:
        return self.decision.kept_default

    @property
    def pairs(self) -> int:
        return self.decision.pairs

    @property
    def strategy(self) -> str:
        return self.decision.strategy


def choose(
    decisions: Sequence[StoredDecision], compiler: str | None, min_writers: int
) -> Ruling | None:
    """The decision to serve by the module's rule; None when no row qualifies."""
    pools: dict[str | None, list[StoredDecision]] = defaultdict(list)
    for d in decisions:
        pools[d.compiler].append(d)
    served = {
        c: found
        for c, pool in pools.items()
        if (found := _best_row(pool, min_writers)) is not None
    }
    if not served:
        return None
    if compiler is not None and compiler in served:
        compiler_served: str | None = compiler
    else:  # None is a pool too (unknown compiler), never "any" asked for
        compiler_served = max(served, key=lambda c: max(_age(d) for d in pools[c]))
    decision, writers = served[compiler_served]
    stale = compiler is not None and compiler_served != compiler
    return Ruling(decision=decision, writers=writers, stale=stale)


def _best_row(
    pool: Sequence[StoredDecision], min_writers: int
) -> tuple[StoredDecision, int] | None:
    """Under one compiler: the served row's answer and supporters, or None."""
    newest: dict[str | None, StoredDecision] = {}
    for d in pool:  # each writer one vote: its newest decision
        if d.writer not in newest or _age(d) > _age(newest[d.writer]):
            newest[d.writer] = d
    supporters: dict[Row, list[StoredDecision]] = defaultdict(list)
    opposers: Counter[Row] = Counter()
    vetoed: set[Row] = set()
    for d in newest.values():
        row = _row(d.config)
        if d.kept_default or (
            d.p_value is not None and d.p_value <= ALPHA and d.speedup > 1.0
        ):
            supporters[row].append(d)
        elif d.speedup_high is not None and d.speedup_high < 1.0:
            opposers[row] += 1
        if d.refuted_config is not None:
            refuted = _row(d.refuted_config)
            if d.refuted_reason == "outputs":
                vetoed.add(refuted)
            else:
                opposers[refuted] += 1
    ranked = []
    for row, backing in supporters.items():
        votes = len(backing) - opposers[row]
        if votes < 1 or len(backing) < min_writers or row in vetoed:
            continue
        median = statistics.median(d.speedup_low for d in backing)
        ranked.append(((votes, median, max(_age(d) for d in backing)), backing))
    if not ranked:
        return None
    _, backing = max(ranked, key=lambda r: r[0])
    by_low = sorted(backing, key=lambda d: (d.speedup_low, _age(d)))
    return by_low[(len(by_low) - 1) // 2], len(backing)


def _row(config: np.ndarray[Any, Any]) -> Row:
    # The decoded float32 row: one config stored in two dtypes is one config.
    arr = np.asarray(config, np.float32)
    return arr.shape, arr.tobytes()


def _age(d: StoredDecision) -> tuple[Any, int]:
    return d.decided_at, d.id


def _servable(spec: CollectionSpec, d: StoredDecision) -> bool:
    """A row the collection takes as a decision (rows stored before the rule
    were not checked)."""
    if spec.decision_options is None:
        return True
    try:
        spec.decision_options(d.config)
    except ValueError:
        return False
    return True


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

    async def best(self, query: BestQuery) -> Choice:
        """The decision to reuse for ``query``'s program; ``NoDecision`` if none."""
        runner = self.registry.get(query.model)
        target = query.target or runner.manifest.target
        spec = get(runner.collection)
        if query.graph_id is not None:
            key = DecisionKey.graph(runner.collection, target, query.graph_id)
        else:
            fp = query.hlo_fingerprint or ""
            key = DecisionKey.fingerprint(runner.collection, target, fp)
        decisions = await self._decisions(key, spec)
        if not query.anonymous:
            decisions = tuple(d for d in decisions if d.writer is not None)
        found = choose(decisions, query.compiler, query.min_writers)
        if found is None:
            self.events.best_lookup(target, "miss")
            name = "graph_id" if query.graph_id else "hlo_fingerprint"
            raise NoDecision(
                f"no decision for {name} {key.name} on target {target!r}"
                + (f" by {query.min_writers}+ writers" if query.min_writers > 1 else "")
                + ": tune it (and POST /v1/decisions)",
                name,
            )
        d = found.decision
        self.events.best_lookup(target, "stale" if found.stale else "hit")
        options = (
            {} if spec.decision_options is None else spec.decision_options(d.config)
        )
        return Choice(
            decision=d,
            target=target,
            writers=found.writers,
            stale=found.stale,
            graph_id=d.graph_id,
            compiler_options=dict(options),
        )

    async def _decisions(
        self, key: DecisionKey, spec: CollectionSpec
    ) -> Sequence[StoredDecision]:
        async def read() -> list[StoredDecision]:
            if key.kind == "graph":
                rows = await self.db.run(
                    lambda s: s.decisions.for_graph(
                        key.collection, key.target, key.name
                    )
                )
            else:
                rows = await self.db.run(
                    lambda s: s.decisions.for_fingerprint(
                        key.collection, key.target, key.name
                    )
                )
            return [d for d in rows if _servable(spec, d)]

        try:
            return await self.cache.decisions(key, read)
        except StoreUnavailable:
            self.events.store_error("read_decisions")
            raise DecisionsUnavailable(
                "decisions not read: the measurement database is unavailable; "
                "retry later"
            ) from None
