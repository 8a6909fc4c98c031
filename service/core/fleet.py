"""The fleet's tuning gain: per model and target, what tuning found on every graph.

    summarise(graphs, decisions) -> [TargetFleet]   pure: per-graph summaries -> per target
    FleetSnapshot.capped(n)                   at most n targets per model, the rest "other"
    FleetGain.refresh()                       two database queries, then a new snapshot
    FleetGain.refresher(period_s) -> Periodic   the same on a timer

A graph counts as tuned once its default config was measured (``costmodel tune``
measures it in every round); its gain is best / default, the fastest runtime measured
of any config over the fastest of the default (``store/summary.py``), so 0.8 means
tuning found a config 1.25x faster than the compiler's default. A target's ``gain`` is
the geometric mean of default / best over its tuned graphs (a speedup, >= 1), the
figure a team running tuners asks for first.

The figures come from the shared database, so every worker and replica computes the
same ones: each refreshes its own snapshot on a timer, off the request path (no rank
or feedback request ever waits for this query), and ``/metrics`` and
``GET /v1/targets`` read the latest snapshot.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.periodic import Periodic
from xla_costmodel.service.store import StoreError
from xla_costmodel.service.store.summary import GraphSummary

log = logging.getLogger(__name__)
OTHER = "other"  # the target label of every target past the cap


class FleetEvents(Protocol):
    def store_error(self, op: str) -> None: ...


@dataclass(frozen=True)
class TargetFleet:
    """One model's measurements on one target."""

    model: str
    collection: str
    target: str
    programs: int  # graphs with measurements
    measurements: int
    ratios: tuple[float, ...]  # best / default of each tuned graph
    decisions: int = 0  # tuning decisions stored (``store/decisions.py``)

    @property
    def tuned(self) -> int:
        """Graphs whose default config was measured."""
        return len(self.ratios)

    @property
    def gain(self) -> float | None:
        """Geometric mean of default / best over the tuned graphs (None: none)."""
        if not self.ratios:
            return None
        return math.exp(-sum(map(math.log, self.ratios)) / len(self.ratios))


@dataclass(frozen=True)
class FleetSnapshot:
    as_of: datetime | None  # None: no refresh has succeeded yet
    targets: tuple[TargetFleet, ...]  # every target, sorted by (model, target)

    def capped(self, max_targets: int) -> list[TargetFleet]:
        """Per model the ``max_targets`` targets with most measurements, the others
        merged into one ``other`` target: metric labels stay bounded whatever
        target names clients send."""
        by_model: dict[str, list[TargetFleet]] = defaultdict(list)
        for entry in self.targets:
            by_model[entry.model].append(entry)
        kept: list[TargetFleet] = []
        for model, entries in sorted(by_model.items()):
            # A target a client named "other" joins the overflow: one series each.
            named = [t for t in entries if t.target != OTHER]
            named.sort(key=lambda t: (-t.measurements, t.target))
            rest = named[max_targets:] + [t for t in entries if t.target == OTHER]
            kept += named[:max_targets]
            if rest:
                kept.append(_merged(model, OTHER, rest))
        return kept


EMPTY = FleetSnapshot(None, ())


def summarise(
    graphs: Iterable[GraphSummary],
    decisions: Mapping[tuple[str, str, str], int] | None = None,
) -> list[TargetFleet]:
    """Per (model, target), sorted: programs, measurements, best/default per tuned
    graph, and ``decisions`` (per (model, collection, target)): a target with
    decisions only is listed too."""
    groups: dict[tuple[str, str], list[GraphSummary]] = defaultdict(list)
    collections: dict[tuple[str, str], str] = {}
    for graph in graphs:
        groups[graph.model, graph.target].append(graph)
        collections[graph.model, graph.target] = graph.collection
    decided: dict[tuple[str, str], int] = defaultdict(int)
    for (model, collection, target), count in (decisions or {}).items():
        decided[model, target] += count
        collections.setdefault((model, target), collection)
    return [
        TargetFleet(
            model=model,
            collection=collections[model, target],
            target=target,
            programs=len({r.graph_id for r in groups[model, target]}),
            measurements=sum(r.measurements for r in groups[model, target]),
            ratios=tuple(
                r.best_ns / r.default_ns
                for r in groups[model, target]
                if r.default_ns is not None
            ),
            decisions=decided[model, target],
        )
        for model, target in sorted(collections)
    ]


def _merged(model: str, target: str, entries: Sequence[TargetFleet]) -> TargetFleet:
    return TargetFleet(
        model=model,
        collection=entries[0].collection,
        target=target,
        programs=sum(e.programs for e in entries),
        measurements=sum(e.measurements for e in entries),
        ratios=tuple(r for e in entries for r in e.ratios),
        decisions=sum(e.decisions for e in entries),
    )


class FleetGain:
    """The latest ``FleetSnapshot`` of the database, refreshed by ``run``."""

    def __init__(self, db: Database, events: FleetEvents) -> None:
        self.db = db
        self.events = events
        self.snapshot = EMPTY

    async def refresh(self) -> bool:
        """Query the database once; on failure keep the last snapshot (False)."""
        try:
            graphs = await self.db.run(lambda store: store.graph_summaries())
            decisions = await self.db.run(lambda store: store.decisions.counts())
        except StoreError as exc:
            self.events.store_error("fleet_summary")
            log.warning("fleet summary not refreshed", extra={"error": str(exc)})
            return False
        targets = tuple(summarise(graphs, decisions))
        self.snapshot = FleetSnapshot(datetime.now(UTC), targets)
        return True

    def refresher(self, period_s: float) -> Periodic:
        """``refresh`` now and every ``period_s`` (the app's lifespan runs it)."""
        return Periodic("fleet-gain", period_s, self.refresh, at_start=True)
