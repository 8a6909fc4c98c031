"""Target knowledge in the service: learned across every graph measured on a target.

    TargetKnowledge.get(runner, target) -> Knowledge | None     no I/O: for a rank
    TargetKnowledge.heard(event, source)        an event (the bus's subscriber)
    TargetKnowledge.touch()                     refresh now, not at the next tick
    TargetKnowledge.refresher(period_s) -> Periodic                the refresher
    await TargetKnowledge.refreshed()      once a refresh after every wake-up ended

Per (model, version, target) the service keeps one
``xla_costmodel.tpugraphs.knowledge.Knowledge``: the artifact's seeds for that target
(its training programs), every graph measured on the target in the database (as
``costmodel tune`` leaves them: the default and the configs it tried), and the seeds
of the artifact's other targets at reduced trust. Collections without a default
config (tile, layout) have none.

Only targets that exist are fitted and kept: the artifact's seeded ones, those a
writer was created for, and those with stored measurements (learned from the
``MeasurementsWritten`` events, ``events.py``, or checked by the refresher for a
target a rank named). A rank naming any other string gets the model's
unseen-target view, built once per model version, and nothing is fitted or cached
for it: invented targets cannot evict the real ones' knowledge. Each writer's rows
are read in its own window of the newest ``MAX_ROWS`` and become its own records
(one vote per writer, ``tpugraphs/knowledge.py``), each with the compiler it was
measured under; a record compares programs by the graph's opcode summary, which
``Graphs`` keeps (``GraphSummaries``).

Nothing here runs inside a rank: ``get`` reads what the refresher built last. The
refresher, a task of the app's loop, wakes every ``period_s`` and at once when
the bus delivers an event that changes a fit (``heard``: measurements written by
any process, writers changed, events missed; a decision without pairs wakes
nothing), asks ``generations`` for each wanted target's generation (count, newest
id: from memory while known fresh, else one indexed query per target, never per
rank) and refits in a worker thread when it changed. So feedback stored through
any replica shapes every replica's rankings within the notification bound plus
one fit (``period_s`` plus one fit without a live notification channel;
docs/feedback.md). Until a target was fitted once, ``get`` answers the seeds
alone, built when the model loads. ``refreshed`` waits for the refresh a write
woke, not for a quiet period (a test that counts the rank path's statements must
not count the refit's).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import partial
from typing import NamedTuple, Protocol

import anyio.to_thread
import numpy as np
import numpy.typing as npt

from xla_costmodel.runner import ArtifactRunner
from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.events import (
    Event,
    MeasurementsWritten,
    Missed,
    Source,
    WritersChanged,
)
from xla_costmodel.service.core.generations import Generations
from xla_costmodel.service.core.periodic import Periodic
from xla_costmodel.service.store import MeasurementStore, StoreError
from xla_costmodel.service.store.records import StoredRows
from xla_costmodel.tpugraphs import knowledge as kn
from xla_costmodel.tpugraphs.collections import get as collection_spec

log = logging.getLogger(__name__)
F64 = npt.NDArray[np.float64]
MAX_TARGETS = 64  # (model, version, target) kept and polled per process
# Targets a rank named that are not known to exist, checked (one indexed query
# each) at the refresher's next tick; more are forgotten until named again.
MAX_ASKED = 64
# The newest measurements of each writer on a target a refit reads: a bound on one
# refit's read and memory rather than a tuned value (one writer's default hourly
# feedback quota, COSTMODEL_FEEDBACK_QUOTA_ROWS, is as many); per writer, so one
# writer's flood cannot push the others' rows out (docs/security.md).
MAX_ROWS = 200_000


class GraphSummaries(Protocol):
    """Where measured graphs' opcode summaries come from (``Graphs``): by id, those
    it has; ``StoreError`` if it cannot say."""

    async def summaries(self, gids: Iterable[str]) -> dict[str, F64]: ...


class KnowledgeKey(NamedTuple):
    """Whose knowledge: a target's, for one model version."""

    model: str
    version: str
    target: str


class KnowledgeEvents(Protocol):
    def store_error(self, op: str) -> None: ...
    def knowledge_fitted(self, model: str, seconds: float, programs: int) -> None: ...


@dataclass(frozen=True)
class Entry:
    """One target's fitted knowledge, as a rank reads it."""

    knowledge: kn.Knowledge
    version: int  # bumps on every refit: tags the per-graph fits made with it
    generation: tuple[int, int] | None  # of the database rows in it; None: seeds only


@dataclass(frozen=True)
class _Want:
    runner: ArtifactRunner
    target: str


class TargetKnowledge:
    def __init__(
        self,
        db: Database,
        generations: Generations,
        events: KnowledgeEvents,
        graphs: GraphSummaries,
    ) -> None:
        self.db = db
        self.generations = generations
        self.events = events
        self.graphs = graphs
        self._entries: dict[KnowledgeKey, Entry] = {}
        self._unseen: dict[tuple[str, str], Entry] = {}  # per model version
        # Targets are whatever clients name: the ones kept (and polled) are bounded,
        # the least recently ranked for dropped first.
        self._wanted: OrderedDict[KnowledgeKey, _Want] = OrderedDict()
        self._seeds: dict[tuple[str, str], dict[str, list[kn.ProgramRecord]]] = {}
        self._known: set[tuple[str, str]] = set()  # (collection, target) that exist
        self._writer_targets: frozenset[str] = frozenset()  # writers' allowed ones
        self._asked: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._wake = asyncio.Event()
        self._versions = 0
        self._wakes = 0  # wake-ups so far (writes heard, targets first ranked)
        self._covered = 0  # of those, the ones a refresh began after and ended
        self._ended = asyncio.Condition()  # a refresh ended

    # -- the request path: memory only ------------------------------------------

    def get(self, runner: ArtifactRunner, target: str) -> Entry | None:
        """The latest knowledge of (model, version, target); a target not fitted yet
        answers the model's seeds as an unseen target sees them (None before those
        were built, or for a collection without a default config) and is fitted by
        the refresher next, if it exists (module docstring)."""
        if runner.manifest.spec.default_config is None:
            return None
        key = KnowledgeKey(runner.name, runner.version, target)
        found = self._entries.get(key)
        if key in self._wanted:
            self._wanted.move_to_end(key)
        elif not self._exists(runner, target):
            where = (runner.collection, target)
            self._asked[where] = None  # checked at the next tick, never fitted here
            self._asked.move_to_end(where)
            while len(self._asked) > MAX_ASKED:
                self._asked.popitem(last=False)
        else:
            self._wanted[key] = _Want(runner, target)
            self.touch()
            while len(self._wanted) > MAX_TARGETS:
                dropped, _ = self._wanted.popitem(last=False)
                self._entries.pop(dropped, None)
        if found is None:
            found = self._unseen.get((runner.name, runner.version))
        return found

    def touch(self) -> None:
        """Refresh now, not at the next tick (an event that changes a fit, a target
        first ranked)."""
        self._wakes += 1
        self._wake.set()

    async def refreshed(self) -> None:
        """Return once a refresh that began after every wake-up so far has ended:
        the knowledge then holds every write this process had heard of at the call,
        and no refresh they woke is left (the next runs at a tick or a new wake-up).
        A refresh that failed has ended too (its errors are counted)."""
        wanted = self._wakes
        async with self._ended:
            await self._ended.wait_for(lambda: self._covered >= wanted)

    def heard(self, event: Event, source: Source) -> None:
        """An event (``EventBus.subscribe``): refresh if it changes a fit; a target
        measured exists now. A decision alone changes none."""
        match event:
            case MeasurementsWritten(collection, target, _):
                self._known.add((collection, target))
                self.touch()
            case WritersChanged() | Missed():  # rows purged, targets changed
                self.touch()

    def _exists(self, runner: ArtifactRunner, target: str) -> bool:
        seeds = self._seeds.get((runner.name, runner.version), {})
        return (
            target in seeds
            or target in self._writer_targets
            or (runner.collection, target) in self._known
        )

    # -- the refresher ------------------------------------------------------------

    async def prepare(self, runners: list[ArtifactRunner]) -> None:
        """Fit the seeds of freshly loaded models: each seeded target, and the view
        of a target none of them knows (every seed at foreign trust)."""
        for runner in runners:
            if runner.manifest.spec.default_config is None:
                continue
            seeds = await anyio.to_thread.run_sync(self._seeded, runner)
            version = (runner.name, runner.version)
            if version not in self._unseen:
                self._unseen[version] = await anyio.to_thread.run_sync(
                    self._fit, runner, "", seeds, [], None
                )
            for target in seeds:
                self._wanted.setdefault(
                    KnowledgeKey(*version, target), _Want(runner, target)
                )
        await self.refresh()

    def refresher(self, period_s: float) -> Periodic:
        """``refresh`` every ``period_s``, and at once when woken (``touch``)."""
        return Periodic("target-knowledge", period_s, self.refresh, wake=self._wake)

    async def refresh(self) -> None:
        """Fit every wanted (model, version, target) that is new or whose
        measurements changed since its last fit; first learn which targets exist."""
        began = self._wakes  # no await since the wake-up event was cleared
        try:
            await self._refresh_all()
        finally:
            self._covered = max(self._covered, began)
            async with self._ended:
                self._ended.notify_all()

    async def _refresh_all(self) -> None:
        try:
            await self._learn_targets()
        except StoreError as exc:
            self.events.store_error("knowledge")
            log.warning("targets not checked", extra={"error": str(exc)})
        for key, want in list(self._wanted.items()):
            try:
                await self._refresh(key, want)
            except StoreError as exc:
                self.events.store_error("knowledge")
                log.warning("target knowledge not refreshed", extra={"error": str(exc)})

    async def _learn_targets(self) -> None:
        """The writers' allowed targets, and whether the targets ranks asked for
        since the last tick have measurements (one indexed query each)."""
        found = await self.db.run(lambda s: s.writers.list())
        self._writer_targets = frozenset(
            t for w in found if w.revoked is None for t in w.targets or ()
        )
        asked, self._asked = list(self._asked), OrderedDict()
        for collection, target in asked:
            if (collection, target) in self._known:
                continue
            count, _ = await self.db.run(partial(_generation, collection, target))
            if count:
                self._known.add((collection, target))

    async def _refresh(self, key: KnowledgeKey, want: _Want) -> None:
        collection, target = want.runner.collection, want.target
        generation = await self.generations.current(
            collection,
            target,
            None,
            lambda: self.db.run(lambda s: s.target_generation(collection, target)),
        )
        entry = self._entries.get(key)
        if entry is not None and (entry.generation or (0, 0)) == generation:
            return
        rows = {}
        if generation[0]:
            rows = await self.db.run(
                lambda s: s.target_measurements(collection, target, MAX_ROWS)
            )
        parts = _programs(rows)
        summaries = await self.graphs.summaries({gid for gid, _, _ in parts})
        default = _default_row(want.runner)
        records = []
        for gid, writer, compiler in parts:
            summary = summaries.get(gid)
            if summary is None:  # the graph is gone from the archive
                continue
            measured = rows[gid]
            mine = [
                i
                for i, (w, c) in enumerate(
                    zip(measured.writers, measured.compilers, strict=True)
                )
                if w == writer and c == compiler
            ]
            found = kn.record(
                gid,
                summary,
                measured.configs[mine],
                measured.runtimes_ns[mine],
                default,
                voter=writer or "",  # anonymous rows: one writer among the others
                compiler=compiler,
            )
            if found is not None:
                records.append(found)
        seeds = self._seeded(want.runner)
        fitted = await anyio.to_thread.run_sync(
            self._fit, want.runner, target, seeds, records, generation
        )
        if key in self._wanted:  # not dropped for newer targets meanwhile
            self._entries[key] = fitted

    # -- fitting (worker threads) -------------------------------------------------

    def _seeded(self, runner: ArtifactRunner) -> dict[str, list[kn.ProgramRecord]]:
        """The artifact's seeds, read once per model version (empty: none shipped)."""
        key = (runner.name, runner.version)
        if key not in self._seeds:
            spec = runner.manifest.knowledge
            found = {} if spec is None else kn.load_seeds(runner.path / spec.file)
            compilers = {} if spec is None else spec.compiler
            self._seeds[key] = {
                t: [replace(r, compiler=compilers.get(t)) for r in rs]
                for t, rs in found.items()
            }
        return self._seeds[key]

    def _fit(
        self,
        runner: ArtifactRunner,
        target: str,
        seeds: dict[str, list[kn.ProgramRecord]],
        records: list[kn.ProgramRecord],
        generation: tuple[int, int] | None,
    ) -> Entry:
        start = time.perf_counter()
        others = [
            r
            for t, rs in sorted(seeds.items())
            if t != target
            for r in kn.foreign(rs, t)
        ]
        own = list(seeds.get(target, []))
        fitted = kn.Knowledge.fit(others + own + records, _default_row(runner))
        seconds = time.perf_counter() - start
        self.events.knowledge_fitted(runner.name, seconds, fitted.programs)
        self._versions += 1
        return Entry(fitted, self._versions, generation)


def _generation(
    collection: str, target: str, store: MeasurementStore
) -> tuple[int, int]:
    return store.target_generation(collection, target)


def _programs(rows: dict[str, StoredRows]) -> list[tuple[str, str | None, str | None]]:
    """(graph, writer, compiler) of every program the rows hold, oldest first (by
    its newest row), each writer's newest ``MAX_WRITER_PROGRAMS`` only: the records
    the fit would keep, so a flood of graphs is not even summarised."""
    newest: dict[tuple[str, str | None, str | None], int] = {}
    for gid, measured in rows.items():
        for w, c, i in zip(
            measured.writers, measured.compilers, measured.ids.tolist(), strict=True
        ):
            newest[(gid, w, c)] = max(i, newest.get((gid, w, c), i))
    order = sorted(newest, key=lambda p: -newest[p])
    per_writer: dict[str | None, int] = {}
    kept = []
    for part in order:
        per_writer[part[1]] = per_writer.get(part[1], 0) + 1
        if per_writer[part[1]] <= kn.MAX_WRITER_PROGRAMS:
            kept.append(part)
    return kept[::-1]


def _default_row(runner: ArtifactRunner) -> npt.NDArray[np.float32]:
    default = collection_spec(runner.collection).default_config
    assert default is not None  # get() and prepare() skip collections without one
    return np.asarray(default, np.float32)
