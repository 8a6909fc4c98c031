"""The tuner the fleet simulation replays: one program's collected rounds, the real
policy, the real sequential decision.

A config measured in a round is the median of ``TUNE_ROUNDS`` of its collected
rounds' minima drawn at random, against the default measured the same way (the
controls). The final decision takes ``policy.finalists`` of what was measured to
``decide.Sequential``, each pair drawn from ``fleet_noise.PairNoise`` around the
truth (each config's median over every collected round). Measurements go to the
service's code path (``tpugraphs.blend``) exactly as ``costmodel tune`` sends them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from xla_costmodel.clients.xla import decide, policy
from xla_costmodel.models import xla_cpu_programs
from xla_costmodel.studies.fleet_noise import PairNoise, sidecar_residuals
from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.blend import Measured, blend
from xla_costmodel.tpugraphs.collections import XLA_CPU
from xla_costmodel.tpugraphs.knowledge import (
    Knowledge,
    ProgramRecord,
    record,
    summarize,
)
from xla_costmodel.tpugraphs.reader import load_npz

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
TUNE_ROUNDS = 3  # a measurement: median of this many rounds (TUNE_PROTOCOL)


@dataclass(frozen=True)
class SimProgram:
    name: str
    family: str
    configs: F32  # [C, W], row 0 the default
    runtimes: F64  # [C] truth (median over rounds)
    rounds: npt.NDArray[np.int64]  # [C, R] per-round minima
    summary: F64
    residuals: F64 = field(default_factory=lambda: np.zeros(0))  # fleet_noise
    # The file's rows this program keeps ([C] indices): all of them, or the ones an
    # older spec can express (``load_target(spec=...)``); priors are indexed by it.
    rows: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def oracle_v1(self) -> float:
        """The best speedup among the rows ``xla_cpu/1`` can express (threshold at
        its default): what the older space offered on the same measurements."""
        v1 = self.configs[:, xla_cpu2.V1_WIDTH] == 1.0
        return float(self.runtimes[0] / self.runtimes[v1].min())


def load_target(folder: Path, spec: str = xla_cpu2.SPEC) -> list[SimProgram]:
    """The target's measured programs; with ``spec="xla_cpu/1"`` each keeps only the
    rows that spec can express (the tuner of the older space on the same data)."""
    if spec not in (xla_cpu2.SPEC, xla_cpu.SPEC):
        raise ValueError(f"unknown spec {spec!r}")
    out = []
    for p in xla_cpu_programs.load_programs(folder):
        if p.round_min is None:
            continue
        keep = np.arange(len(p.configs))
        if spec == xla_cpu.SPEC:
            keep = np.flatnonzero(p.configs[:, xla_cpu2.V1_WIDTH] == 1.0)
        graph = load_npz(p.path, XLA_CPU.name).graph
        out.append(
            SimProgram(
                p.name,
                p.family,
                p.configs[keep],
                p.runtimes[keep],
                p.round_min[keep],
                summarize(graph.node_opcode),
                sidecar_residuals(p.path),
                keep,
            )
        )
    return out


def noise_of(programs: Sequence[SimProgram]) -> PairNoise:
    return PairNoise.fit({p.name: p.residuals for p in programs})


@dataclass(frozen=True)
class Outcome:
    """One simulated run: the kept row (0: the default), the configs compiled and
    the pairs the decision spent."""

    kept: int
    compiles: int
    pairs: int


class Tuner:
    """The real policy over one program's collected rounds (module docstring)."""

    def __init__(
        self,
        program: SimProgram,
        noise: PairNoise,
        rng: np.random.Generator,
        budget: int = 8,
    ) -> None:
        self.p, self.noise, self.rng = program, noise, rng
        self.budget = budget
        self.rows: list[int] = []
        self.times: list[float] = []
        self.vs_default: dict[int, float] = {}  # as Rounds: vs the round's default
        self.default = 0.0
        self.pairs = 0

    def round(self) -> None:
        """A round begins: the controls measure the default beside the picks."""
        self.default = self.measure(0)

    def measure(self, i: int) -> float:
        r = self.p.rounds.shape[1]
        picks = self.rng.choice(r, size=min(TUNE_ROUNDS, r), replace=False)
        t = float(np.median(self.p.rounds[i, picks]))
        self.rows.append(i)
        self.times.append(t)
        if i != 0:
            self.vs_default[i] = t / self.default
        return t

    def stored(self) -> ProgramRecord | None:
        """What the service holds after this run's feedback."""
        return record(
            self.p.name,
            self.p.summary,
            self.p.configs[self.rows],
            self.times,
            self.p.configs[0],
        )

    def verify(self, row: int, test: decide.Sequential | None = None) -> decide.Verdict:
        """``row`` against the default, pairs drawn until ``test`` (default: the
        tuner's) decides."""
        truth = float(np.log(self.p.runtimes[0] / self.p.runtimes[row]))
        test = test or decide.Sequential()
        while not test.done:
            test.add(np.exp(self.noise.draw(self.p.name, truth, self.rng)), 1.0)
        self.pairs += test.pairs
        return test.final()

    def finish(self) -> int:
        """The final decision (``Rounds.decide``): each of ``policy.finalists``
        verified sequentially; the kept row (0: the default)."""
        cands = policy.finalists(self.vs_default, policy.confirm(self.budget))
        k = decide.best([self.verify(i) for i in cands])
        return 0 if k is None else cands[k]

    def outcome(self, kept: int) -> Outcome:
        return Outcome(kept, len(self.vs_default), self.pairs)


def tune_model(
    program: SimProgram,
    knowledge: Knowledge | None,
    prior: F32 | None,
    rng: np.random.Generator,
    noise: PairNoise,
    budget: int,
    foreign: bool = True,
    first: Sequence[int] = (),
) -> tuple[Outcome, ProgramRecord | None]:
    """The model's run at ``budget``; ``first``: rows already compiled (a stored
    decision that did not hold), measured in the first round, counted in the budget."""
    t = Tuner(program, noise, rng, budget)
    taken = {0}

    def prior_of(rows: F32) -> F32 | None:  # the prior's scores of measured rows
        if prior is None:
            return None
        return prior[
            [int(np.flatnonzero((program.configs == r).all(1))[0]) for r in rows]
        ]

    for n, step in enumerate(policy.plan(budget)):
        t.round()
        if n == 0 and first:
            for i in first:
                taken.add(i)
                t.measure(i)
            left = max(0, step.size - len(first))
            step = policy.Round(left, min(left, max(0, step.explore - len(first))))
        rows = np.asarray(t.rows)
        measured = Measured(program.configs[rows], np.asarray(t.times))
        shaped = blend(
            program.configs,
            prior,
            knowledge,
            program.summary,
            measured,
            foreign=foreign,
            prior_measured=prior_of(measured.configs),
            portfolio=step.explore > 0,
            exclude=program.name,
        )
        ranking = np.argsort(shaped.scores, kind="stable")
        portfolio = None if shaped.portfolio is None else list(shaped.portfolio)
        for i in policy.pick(list(ranking), portfolio, step, sorted(taken)):
            taken.add(i)
            t.measure(i)
    return t.outcome(t.finish()), t.stored()


def tune_random(
    program: SimProgram, rng: np.random.Generator, noise: PairNoise, budget: int
) -> Outcome:
    t = Tuner(program, noise, rng, budget)
    n = len(program.configs)
    picks = rng.choice(np.arange(1, n), size=min(budget, n - 1), replace=False)
    for part in np.array_split(picks, min(policy.ROUNDS, len(picks))):
        t.round()
        for i in part:
            t.measure(int(i))
    return t.outcome(t.finish())


def reuse(
    program: SimProgram,
    decided: int,
    rng: np.random.Generator,
    noise: PairNoise,
) -> decide.Verdict:
    """A second machine verifies a stored decision: one compile, the sequential test
    with the stored decision on trial (``decide.Sequential(hold=True)``)."""
    test = decide.Sequential(min_gain=decide.REUSE_MIN_GAIN, hold=True)
    return Tuner(program, noise, rng).verify(decided, test)
