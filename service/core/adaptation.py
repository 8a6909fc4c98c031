"""Per-graph adaptation: the model's prior combined with a fit on what was measured.

    Adaptation.adapt(runner, target, gid, configs, prior, score) -> (scores, used)

When (collection, target, graph) has at least ``min_measurements`` distinct measured
configs, scores come from ``xla_costmodel.tpugraphs.adapt.fit`` (the method and why: its docstring)
fitted on those measurements with the model's scores of the measured configs as the
prior. ``used`` is the number of distinct configs the fit used, 0 for the prior alone.

Fitted models are cached per (model, version, target, graph) with the database's
generation of that graph's measurements (count, newest id). Every rank request reads
the generation (one indexed query), so a measurement stored through any replica
invalidates every replica's fit on its next request. A database failure means the
prior alone: logged and counted, never an error.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio
import anyio.to_thread
import numpy as np
import numpy.typing as npt

from xla_costmodel.runner import ArtifactRunner
from xla_costmodel.service.core.database import Database
from xla_costmodel.service.store import StoreError
from xla_costmodel.tpugraphs.adapt import Adapter, fit

log = logging.getLogger(__name__)
F32 = npt.NDArray[np.float32]
PriorFn = Callable[[F32], Awaitable[F32]]
Key = tuple[str, str, str, str]  # model, version, target, graph_id


class AdaptEvents(Protocol):
    def adaptation_fitted(self, model: str, seconds: float, used: int) -> None: ...
    def ranking_adapted(self, model: str, adapted: bool) -> None: ...
    def store_error(self, op: str) -> None: ...


@dataclass(frozen=True)
class _Fit:
    generation: tuple[int, int]
    adapter: Adapter | None  # None: nothing measured
    shape: tuple[int, ...] = ()  # of one measured config


class Adaptation:
    def __init__(
        self,
        db: Database,
        events: AdaptEvents,
        min_measurements: int,
        max_measurements: int,
        cache_entries: int = 1024,
    ) -> None:
        self.db = db
        self.events = events
        self.min_measurements = min_measurements
        self.max_measurements = max_measurements
        self._fits: OrderedDict[Key, _Fit] = OrderedDict()
        self._cache_entries = cache_entries
        self._locks: dict[Key, anyio.Lock] = {}

    async def adapt(
        self,
        runner: ArtifactRunner,
        target: str,
        gid: str,
        configs: F32,
        prior: F32,
        score: PriorFn,
    ) -> tuple[F32, int]:
        """Scores for ``configs`` (lower = faster) and how many measurements shaped
        them; ``score`` gives the model's scores of other configs of this graph."""
        fitted = await self._fitted(runner, target, gid, configs.shape[1:], score)
        if fitted is None:
            self.events.ranking_adapted(runner.name, False)
            return prior, 0
        scores = await anyio.to_thread.run_sync(fitted.score, configs, prior)
        self.events.ranking_adapted(runner.name, True)
        return scores, fitted.measurements

    async def _fitted(
        self,
        runner: ArtifactRunner,
        target: str,
        gid: str,
        shape: tuple[int, ...],
        score: PriorFn,
    ) -> Adapter | None:
        collection = runner.collection
        try:
            generation = await self.db.run(
                lambda s: s.generation(collection, target, gid)
            )
        except StoreError as exc:
            self._unavailable(exc)
            return None
        if generation[0] < self.min_measurements:
            return None
        key = (runner.name, runner.version, target, gid)
        lock = self._locks.setdefault(key, anyio.Lock())
        try:
            async with lock:  # one fit per graph at a time; the others reuse it
                found = self._fits.get(key)
                if found is None or found.generation != generation:
                    found = await self._fit(runner, target, gid, generation, score)
                    self._keep(key, found)
        except StoreError as exc:
            self._unavailable(exc)
            return None
        finally:
            if not lock.statistics().tasks_waiting:
                self._locks.pop(key, None)
        adapter = found.adapter
        if adapter is None or adapter.measurements < self.min_measurements:
            return None
        return adapter if shape == found.shape else None

    async def _fit(
        self,
        runner: ArtifactRunner,
        target: str,
        gid: str,
        generation: tuple[int, int],
        score: PriorFn,
    ) -> _Fit:
        collection, limit = runner.collection, self.max_measurements
        measured = await self.db.run(
            lambda s: s.measurements(collection, target, gid, limit=limit)
        )
        # Tagged with the generation read before: a write in between only means
        # the next request fits again.
        if not len(measured.ids):
            return _Fit(generation, None)
        prior = await score(measured.configs)
        start = time.perf_counter()
        adapter = await anyio.to_thread.run_sync(
            fit, measured.configs, measured.runtimes_ns, prior
        )
        self.events.adaptation_fitted(
            runner.name, time.perf_counter() - start, adapter.measurements
        )
        return _Fit(generation, adapter, tuple(measured.configs.shape[1:]))

    def _keep(self, key: Key, found: _Fit) -> None:
        self._fits[key] = found
        self._fits.move_to_end(key)
        while len(self._fits) > self._cache_entries:
            self._fits.popitem(last=False)

    def _unavailable(self, exc: Exception) -> None:
        self.events.store_error("adapt")
        log.warning("ranking without adaptation", extra={"error": str(exc)})
