"""Per-graph adaptation: what one graph measured on a target, and fits on it.

    await Adaptation.observed(runner, target, gid) -> Observed | None
    Adaptation.fitted(runner, target, gid, tag) -> fit | None      (sync: the cache)
    Adaptation.fit(runner, target, gid, tag, observed, prior) -> fit   (sync)

``observed`` asks ``generations`` for the graph's measurement generation (count,
newest id): from memory while it is known fresh, one indexed query otherwise
(``generations.py`` states the staleness bound), and reads the rows themselves only
when it changed, so a measurement stored through any replica reaches every
replica's ranking within that bound. The
ranking itself is composed by ``xla_costmodel.tpugraphs.blend`` (the artifact's
prior, the target's knowledge, this fit), given the fit made here beforehand
(``shaping.py``): per-writer shares of ``xla_costmodel.tpugraphs.adapt.fit``
(``shares.py``: per writer, and per compiler, another compiler's rows at reduced
weight), cached per (model, version, target, graph) with its ``FitTag`` (the
generation, the ranking's compiler and the target knowledge's version: the combined
prior the fit shrinks toward changes with it).
A database failure means no adaptation: logged and counted, never an error.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import anyio.to_thread
import numpy as np
import numpy.typing as npt

from xla_costmodel.runner import ArtifactRunner
from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.generations import Generations
from xla_costmodel.service.core.lru import LRU
from xla_costmodel.service.core.shares import Shared, fit_by_writer
from xla_costmodel.service.store import StoreError
from xla_costmodel.tpugraphs import blend
from xla_costmodel.tpugraphs.adapt import Adapter
from xla_costmodel.tpugraphs.blend import distinct_configs

log = logging.getLogger(__name__)
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
# The newest measurements of a graph a fit reads, per writer (``shares.py``): a bound
# on one fit's read and time rather than a tuned value (the study stopped at n = 100;
# a fit of 2,000 configs takes ~9 ms, tpugraphs/adapt.py); per writer, so one
# writer's flood cannot push the others' rows out (docs/security.md).
MAX_MEASUREMENTS = 4000
# Graphs (model, version, target, graph) whose measurements and fit each process keeps
# (two LRUs of this many entries; an entry is up to MAX_MEASUREMENTS rows per writer).
# Chosen by hand when adaptation was added (no measurement recorded); it was the
# setting COSTMODEL_ADAPT_CACHE_ENTRIES until settings kept only what operators set.
CACHE_ENTRIES = 1024


class FitKey(NamedTuple):
    """Whose measurements and fit: a graph's on a target, for one model version."""

    model: str
    version: str
    target: str
    graph_id: str


class AdaptEvents(Protocol):
    def adaptation_fitted(self, model: str, seconds: float, used: int) -> None: ...
    def store_error(self, op: str) -> None: ...


@dataclass(frozen=True)
class Observed:
    """A graph's measurements on a target, as of ``generation``."""

    generation: tuple[int, int]
    configs: F32
    runtimes_ns: npt.NDArray[np.int64]
    writers: tuple[str | None, ...]
    distinct: int  # distinct configs: counted once per generation, not per rank
    compilers: tuple[str | None, ...] = ()  # per row; None: unknown

    def newest_compiler(self) -> str | None:
        """The compiler of the newest row that names one (rows in id order)."""
        return next((c for c in reversed(self.compilers) if c is not None), None)


@dataclass(frozen=True)
class FitTag:
    """What a cached fit was made from; another tag means another fit."""

    generation: tuple[int, int]  # of the graph's measurements
    compiler: str | None  # the ranking's: rows of another weigh less
    knowledge: int | None  # the target knowledge's version (None: none)


@dataclass(frozen=True)
class _Fit:
    tag: FitTag
    adapter: Adapter | Shared


class Adaptation:
    def __init__(
        self,
        db: Database,
        generations: Generations,
        events: AdaptEvents,
        cache_entries: int = CACHE_ENTRIES,
    ) -> None:
        self.db = db
        self.generations = generations
        self.events = events
        # Read when built (tests patch the module constants).
        self.min_measurements = blend.MIN_MEASUREMENTS
        self.max_measurements = MAX_MEASUREMENTS
        self._rows: LRU[FitKey, Observed] = LRU(cache_entries)
        self._fits: LRU[FitKey, _Fit] = LRU(cache_entries)  # from worker threads too

    async def observed(
        self, runner: ArtifactRunner, target: str, gid: str
    ) -> Observed | None:
        """The graph's measurements (None: none, or the database is unavailable)."""
        collection, limit = runner.collection, self.max_measurements
        key = FitKey(runner.name, runner.version, target, gid)
        try:
            # From memory while known fresh (generations.py): a rank of a graph
            # whose measurements did not change sends no database statement.
            generation = await self.generations.current(
                collection,
                target,
                gid,
                lambda: self.db.run(lambda s: s.generation(collection, target, gid)),
            )
            if generation[0] == 0:
                return None
            found = self._rows.get(key)
            if found is None or found.generation != generation:
                # Tagged with the generation read before: a write in between only
                # means the next request reads again.
                rows = await self.db.run(
                    lambda s: s.measurements(collection, target, gid, limit=limit)
                )
                distinct = await anyio.to_thread.run_sync(
                    distinct_configs, rows.configs
                )
                found = Observed(
                    generation,
                    rows.configs,
                    rows.runtimes_ns,
                    tuple(rows.writers),
                    distinct,
                    tuple(rows.compilers),
                )
                self._rows.put(key, found)
        except StoreError as exc:
            self.events.store_error("adapt")
            log.warning("ranking without adaptation", extra={"error": str(exc)})
            return None
        return found if len(found.runtimes_ns) else None

    def fitted(
        self, runner: ArtifactRunner, target: str, gid: str, tag: FitTag
    ) -> Adapter | Shared | None:
        """The graph's cached fit, while ``tag`` is the one it was made with."""
        found = self._fits.get(FitKey(runner.name, runner.version, target, gid))
        return found.adapter if found is not None and found.tag == tag else None

    def fit(
        self,
        runner: ArtifactRunner,
        target: str,
        gid: str,
        tag: FitTag,
        observed: Observed,
        prior: F32,
    ) -> Adapter | Shared:
        """A fresh fit of ``observed`` (timed, cached under ``tag``), shrinking
        toward ``prior``, the combined prior of its configs: per-writer shares,
        rows of a compiler other than ``tag.compiler`` at reduced weight."""
        start = time.perf_counter()
        # Each writer's rows fit alone, one share each (shares.py).
        adapter = fit_by_writer(
            observed.configs,
            observed.runtimes_ns.astype(np.float64),
            prior,
            observed.writers,
            observed.compilers or None,
            tag.compiler,
        )
        self.events.adaptation_fitted(
            runner.name, time.perf_counter() - start, adapter.measurements
        )
        self._fits.put(
            FitKey(runner.name, runner.version, target, gid), _Fit(tag, adapter)
        )
        return adapter
