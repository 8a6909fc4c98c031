"""What shapes a ranking besides the artifact's prior: this graph's measurements on
the target (``adaptation``) and the target's knowledge of other programs.

    await Shaper.shape(batch, options) -> Blended

Read top-down, each step's output the next one's input:

1. the graph's measurements on the target and the target's knowledge (no I/O for
   the knowledge: the refresher keeps it, ``knowledge.py``);
2. in the inference pool: the combined prior (``blend.combine``), the graph's fit
   (cached, else the measured configs scored and fitted), then ``blend.compose``.

The blend itself is ``xla_costmodel.tpugraphs.blend``: the fleet simulation runs the
same functions, so it measures what the service does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from xla_costmodel.runner import ArtifactRunner, Embedding
from xla_costmodel.service.core.adaptation import Adaptation, FitTag, Observed
from xla_costmodel.service.core.inference import InferencePool
from xla_costmodel.service.core.knowledge import Entry, TargetKnowledge
from xla_costmodel.service.core.requests import RankOptions
from xla_costmodel.tpugraphs import blend
from xla_costmodel.tpugraphs.blend import Blended, Combined, Fitted, Measured, Shaping

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


class ShapeEvents(Protocol):
    def ranking_adapted(self, model: str, adapted: bool) -> None: ...


@dataclass(frozen=True)
class Batch:
    """One rank's graph and configs as the artifact scored them."""

    runner: ArtifactRunner
    gid: str
    embedding: Embedding
    summary: F64 | None  # the graph's opcode summary (None: not known here)
    configs: F32
    prior: F32  # the artifact's scores of ``configs``


@dataclass(frozen=True)
class Known:
    """What is known of the graph on the target, read before the blend."""

    target: str
    observed: Observed | None  # the graph's own measurements
    entry: Entry | None  # the target's knowledge
    compiler: str | None  # the one the configs will run under


class Shaper:
    def __init__(
        self,
        adaptation: Adaptation,
        knowledge: TargetKnowledge,
        pool: InferencePool,
        events: ShapeEvents,
    ) -> None:
        self.adaptation = adaptation
        self.knowledge = knowledge
        self.pool = pool
        self.events = events

    async def shape(self, batch: Batch, options: RankOptions) -> Blended:
        """The scores blended with what is known (``options.adapt``), and the
        exploration order (``options.portfolio``); the prior as it is when nothing
        is."""
        known = await self._known(batch, options)
        if known.observed is None and known.entry is None and not options.portfolio:
            blended = Blended(batch.prior, None, Shaping())
        else:
            blended = await self.pool.run(self._blend, batch, known, options.portfolio)
        self.events.ranking_adapted(batch.runner.name, blended.shaping.adapted > 0)
        return blended

    async def _known(self, batch: Batch, options: RankOptions) -> Known:
        """The graph's measurements and the target's knowledge (none without
        ``adapt``), and the compiler: the one asked for, else the target's newest
        rows', else this graph's."""
        runner = batch.runner
        target = options.target or runner.manifest.target
        observed = entry = None
        if options.adapt:
            observed = await self.adaptation.observed(runner, target, batch.gid)
            entry = self.knowledge.get(runner, target)
        if (
            observed is not None
            and observed.configs.shape[1:] != batch.configs.shape[1:]
        ):
            observed = None  # measured with another configurable-node count
        compiler = options.compiler
        if compiler is None and entry is not None:
            compiler = entry.knowledge.compiler
        if compiler is None and observed is not None:
            compiler = observed.newest_compiler()
        return Known(target, observed, entry, compiler)

    def _blend(self, batch: Batch, known: Known, portfolio: bool) -> Blended:
        """In a worker thread: the combined prior, the graph's fit, the blend."""
        observed = known.observed
        measured = None
        if observed is not None:
            measured = Measured(
                observed.configs,
                observed.runtimes_ns.astype(np.float64),
                observed.distinct,
            )
        combined = blend.combine(
            batch.prior,
            None if known.entry is None else known.entry.knowledge,
            batch.summary,
            measured,
            foreign=not batch.runner.manifest.trained_on(known.target),
            exclude=batch.gid,
            compiler=known.compiler,
        )
        fitted = None
        if observed is not None and blend.wants_fit(
            measured, self.adaptation.min_measurements
        ):
            fitted = self._fitted(batch, known, observed, combined)
        return blend.compose(
            batch.configs,
            combined,
            measured,
            fitted,
            min_measurements=self.adaptation.min_measurements,
            portfolio=portfolio,
        )

    def _fitted(
        self, batch: Batch, known: Known, observed: Observed, combined: Combined
    ) -> Fitted:
        """The graph's cached fit, else a fresh one: only then are its measured
        configs scored (thousands, on every rank, would cost more than the rank)."""
        version = None if known.entry is None else known.entry.version
        tag = FitTag(observed.generation, known.compiler, version)
        runner, target = batch.runner, known.target
        found = self.adaptation.fitted(runner, target, batch.gid, tag)
        if found is not None:
            return found
        rows = observed.configs
        _, artifact = self.pool.score(runner, batch.embedding, rows, "", False)
        prior = combined.of(rows, artifact).astype(np.float32)
        return self.adaptation.fit(runner, target, batch.gid, tag, observed, prior)
