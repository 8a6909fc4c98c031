"""What shapes a ranking besides the artifact's prior: this graph's measurements on
the target (``adaptation``) and the target's knowledge of other programs.

    await Shaper.shape(runner, embedding, configs, prior, target, gid, adapt,
                       portfolio) -> Shaped

The blend itself is ``xla_costmodel.tpugraphs.blend``, run in the scorer's pool: the
fleet simulation runs the same function, so it measures what the service does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from xla_costmodel.runner import ArtifactRunner, Embedding
from xla_costmodel.service.core.adaptation import Adaptation, Observed
from xla_costmodel.service.core.knowledge import Entry as KnowledgeEntry
from xla_costmodel.service.core.knowledge import TargetKnowledge
from xla_costmodel.service.core.scoring import Scorer
from xla_costmodel.tpugraphs.blend import Blended, Fit, Measured, blend, fit_now

F32 = npt.NDArray[np.float32]


class ShapeEvents(Protocol):
    def ranking_adapted(self, model: str, adapted: bool) -> None: ...


@dataclass(frozen=True)
class Shaping:
    """Besides this graph's measurements: the target's knowledge and the prior."""

    target_programs: int  # programs of the target (and, foreign, of others) it holds
    target_measurements: int
    knowledge_weight: float  # its share of the combined prior
    prior_weight: float  # the artifact's weight: 1, less if not trained on the target


@dataclass(frozen=True)
class Shaped:
    scores: F32
    adapted: int = 0  # measurements of this graph that shaped the scores
    portfolio: npt.NDArray[np.int64] | None = None  # every index, exploration order
    shaping: Shaping | None = None  # None: the prior alone


class Shaper:
    def __init__(
        self,
        adaptation: Adaptation,
        knowledge: TargetKnowledge,
        scorer: Scorer,
        events: ShapeEvents,
    ) -> None:
        self.adaptation = adaptation
        self.knowledge = knowledge
        self.scorer = scorer
        self.events = events

    async def shape(
        self,
        runner: ArtifactRunner,
        embedding: Embedding,
        configs: F32,
        prior: F32,
        target: str,
        gid: str,
        adapt: bool,
        portfolio: bool,
        compiler: str | None = None,
    ) -> Shaped:
        """The scores blended with what is known (``adapt``), and the exploration
        order (``portfolio``); the prior as it is when nothing is. ``compiler``: the
        one the configs will run under (None: the target's newest rows')."""
        observed = entry = None
        if adapt:
            observed = await self.adaptation.observed(runner, target, gid)
            entry = self.knowledge.get(runner, target)
            if observed is not None and observed.configs.shape[1:] != configs.shape[1:]:
                observed = None  # measured with another configurable-node count
        shaped = Shaped(prior)
        if observed is not None or entry is not None or portfolio:
            b = await self.scorer.run(
                self._blend,
                runner,
                embedding,
                configs,
                prior,
                target,
                gid,
                observed,
                entry,
                portfolio,
                compiler,
            )
            shaping = Shaping(
                b.target_programs,
                b.target_measurements,
                b.knowledge_weight,
                b.prior_weight,
            )
            shaped = Shaped(b.scores, b.adapted, b.portfolio, shaping)
        self.events.ranking_adapted(runner.name, shaped.adapted > 0)
        return shaped

    def _blend(
        self,
        runner: ArtifactRunner,
        embedding: Embedding,
        configs: F32,
        prior: F32,
        target: str,
        gid: str,
        observed: Observed | None,
        entry: KnowledgeEntry | None,
        portfolio: bool,
        compiler: str | None,
    ) -> Blended:
        """``tpugraphs.blend``, in a worker thread."""
        if compiler is None and entry is not None:
            compiler = entry.knowledge.compiler  # the target's newest rows'
        if compiler is None and observed is not None:
            compiler = observed.newest_compiler()  # no knowledge: this graph's

        def prior_of(rows: F32) -> F32:
            return self.scorer.score(runner, embedding, rows, "", False)[1]

        measured: Measured | None = None
        fit: Fit = fit_now
        if observed is not None:
            measured = Measured(
                observed.configs,
                observed.runtimes_ns.astype(np.float64),
                observed.distinct,
            )
            tag = (None if entry is None else entry.version,)
            fit = self.adaptation.fitter(runner, target, gid, observed, tag, compiler)
        return blend(
            configs,
            prior,
            None if entry is None else entry.knowledge,
            self.knowledge.summary(gid),
            measured,
            foreign=not runner.manifest.trained_on(target),
            prior_of=prior_of,
            fit=fit,
            min_measurements=self.adaptation.min_measurements,
            portfolio=portfolio,
            exclude=gid,
            compiler=compiler,
        )
