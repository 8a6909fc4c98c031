"""Target knowledge in the service: learned across every graph measured on a target.

    TargetKnowledge.get(runner, target) -> Knowledge | None     no I/O: for a rank
    TargetKnowledge.summary(gid) / remember(gid, node_opcode)     graph summaries
    TargetKnowledge.touch()                     a write anywhere (generations' listener)
    TargetKnowledge.start(period_s) / stop()                       the refresher

Per (model, version, target) the service keeps one
``xla_costmodel.tpugraphs.knowledge.Knowledge``: the artifact's seeds for that target
(its training programs), every graph measured on the target in the database (as
``costmodel tune`` leaves them: the default and the configs it tried), and the seeds
of the artifact's other targets at reduced trust. Collections without a default
config (tile, layout) have none.

Nothing here runs inside a rank: ``get`` reads what the refresher built last. The
refresher, a task of the app's loop, wakes every ``period_s`` and at once when
``generations`` hears of a write by any process (``touch``), asks ``generations``
for each wanted target's generation (count, newest id: from memory while known
fresh, else one indexed query per target, never per rank) and refits in a worker
thread when it changed. So feedback stored through any replica shapes every
replica's rankings within the notification bound plus one fit (``period_s`` plus
one fit without a live notification channel; docs/feedback.md). Until a target was
fitted once, ``get`` answers the seeds alone, built when the model loads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import anyio.to_thread
import numpy as np
import numpy.typing as npt

from xla_costmodel.runner import ArtifactRunner
from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.generations import Generations
from xla_costmodel.service.store import MeasurementStore, StoreError
from xla_costmodel.service.store.records import StoredGraph
from xla_costmodel.tpugraphs import knowledge as kn
from xla_costmodel.tpugraphs.collections import get as collection_spec

log = logging.getLogger(__name__)
F64 = npt.NDArray[np.float64]
Key = tuple[str, str, str]  # model, version, target
SUMMARIES = 4096  # graph summaries kept (2 KiB each)
MAX_TARGETS = 64  # (model, version, target) kept and polled per process


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
        max_rows: int = 200_000,
    ) -> None:
        self.db = db
        self.generations = generations
        generations.on_change(lambda _: self.touch())
        self.events = events
        self.max_rows = max_rows
        self._entries: dict[Key, Entry] = {}
        self._unseen: dict[tuple[str, str], Entry] = {}  # per model version
        # Targets are whatever clients name: the ones kept (and polled) are bounded,
        # the least recently ranked for dropped first.
        self._wanted: OrderedDict[Key, _Want] = OrderedDict()
        self._seeds: dict[tuple[str, str], dict[str, list[kn.ProgramRecord]]] = {}
        self._summaries: OrderedDict[str, F64] = OrderedDict()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._versions = 0

    # -- the request path: memory only ------------------------------------------

    def get(self, runner: ArtifactRunner, target: str) -> Entry | None:
        """The latest knowledge of (model, version, target); a target not fitted yet
        answers the model's seeds as an unseen target sees them (None before those
        were built, or for a collection without a default config) and is fitted by
        the refresher next."""
        if runner.manifest.spec.default_config is None:
            return None
        key = (runner.name, runner.version, target)
        found = self._entries.get(key)
        if key in self._wanted:
            self._wanted.move_to_end(key)
        else:
            self._wanted[key] = _Want(runner, target)
            self._wake.set()
            while len(self._wanted) > MAX_TARGETS:
                dropped, _ = self._wanted.popitem(last=False)
                self._entries.pop(dropped, None)
        if found is None:
            found = self._unseen.get((runner.name, runner.version))
        return found

    def summary(self, gid: str) -> F64 | None:
        return self._summaries.get(gid)

    def remember(self, gid: str, node_opcode: npt.ArrayLike) -> None:
        if gid not in self._summaries:
            self._summaries[gid] = kn.summarize(node_opcode)
            while len(self._summaries) > SUMMARIES:
                self._summaries.popitem(last=False)

    def touch(self) -> None:
        """This process stored measurements: refresh now, not at the next tick."""
        self._wake.set()

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
                self._wanted.setdefault((*version, target), _Want(runner, target))
        await self.refresh()

    def start(self, period_s: float) -> asyncio.Task[None]:
        self._task = asyncio.get_running_loop().create_task(self.run(period_s))
        return self._task

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run(self, period_s: float) -> None:
        while True:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a
            # cancellation that races a wake-up (feedback just before shutdown),
            # and the task would then never end.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period_s):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.refresh()
            except Exception:  # a bug must not end every later refresh
                log.exception("target knowledge refresh failed")

    async def refresh(self) -> None:
        """Fit every wanted (model, version, target) that is new or whose
        measurements changed since its last fit."""
        for key, want in list(self._wanted.items()):
            try:
                await self._refresh(key, want)
            except StoreError as exc:
                self.events.store_error("knowledge")
                log.warning("target knowledge not refreshed", extra={"error": str(exc)})

    async def _refresh(self, key: Key, want: _Want) -> None:
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
                lambda s: s.target_measurements(collection, target, self.max_rows)
            )
        for gid in [g for g in rows if g not in self._summaries]:
            stored = await self.db.run(partial(_load_graph, gid))
            if stored is not None:
                self.remember(gid, stored.arrays["node_opcode"])
        default = _default_row(want.runner)
        records = []
        for gid, measured in rows.items():
            summary = self._summaries.get(gid)
            if summary is None:  # the graph is gone from the archive
                continue
            found = kn.record(
                gid,
                summary,
                measured.configs,
                measured.runtimes_ns,
                default,
                writers=measured.writers,
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
            self._seeds[key] = found
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


def _load_graph(gid: str, store: MeasurementStore) -> StoredGraph | None:
    return store.load_graph(gid)


def _default_row(runner: ArtifactRunner) -> npt.NDArray[np.float32]:
    default = collection_spec(runner.collection).default_config
    assert default is not None  # get() and prepare() skip collections without one
    return np.asarray(default, np.float32)
