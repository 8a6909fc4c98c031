"""``costmodel simulate [--quick] [--json] [--budgets 1,2,4,8,16]`` (``make
xla-tuning``; the command is ``simulate_cli``): the fleet simulation.

A fleet of tuners on one target, replayed from the collected runtimes of every
target under ``datasets/xla_cpu/<target>/``. Per target, programs arrive in random
orders (``orders``). Along each order the programs are tuned one after another by
the real policy at ``FLEET_K``, and what each run measured is stored, as the service
stores feedback: that is the target's history (the first fleet). Then every program
is tuned at each budget K of ``budgets`` after ``h`` programs of *other families*
were tuned before it (h = 0, 5, 10, 20; the first ``h`` of the order that are not of
its family), with:

- ``model``: the real policy (``clients.xla.policy``: portfolio round, then adapted
  ranking with some exploration) over the service's own code path
  (``tpugraphs.blend``: artifact prior, the target's knowledge fitted on the history's
  stored measurements, per-graph adaptation, portfolio), and the real final decision
  (``clients.xla.decide.Sequential``, ``studies.fleet_tuner``);
- ``random``: K configs drawn uniformly from the same candidates, same decision
  (``RANDOM_DRAWS`` runs per program, also at budgets up to 64 for the budget random
  needs to match the model);
- ``fixed``: the one option set with the best geometric-mean runtime over the ``h``
  earlier programs (all their collected configs: generous to the baseline), applied
  as is, unmeasured, as a user applies one set everywhere (the default at h = 0);
- ``oracle``: the program's best collected config (``oracle_v1``: the best of those
  ``xla_cpu/1`` can express, the loop threshold at its default).

``--spec xla_cpu/1`` replays the older space on the same data: every program keeps
only the rows that spec can express (the no-regression check of ``xla_cpu/2``).

Round measurements are drawn from the collected rounds (``fleet_tuner``); the
decision's pairs from the noise model fitted to the collected controls
(``fleet_noise``). The truth is each config's median over every collected round.
``regressions``: runs whose kept config is truly slower than the default by more
than 2 %; ``slower_of_kept``: of the runs that kept a config, those truly slower at
all. ``reuse``: a second fleet of the same CPU tunes the same programs after the
first; where the first kept a config it compiles only that config and verifies it
with the sequential test, keeping it when it holds, else tuning as usual with it
measured first (``fleet_report.reuse_summary``). The prior is the artifact's scorer
trained leaving the whole target out (``--prior``; off in ``--quick``): the fleet
meets a new CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from xla_costmodel import paths
from xla_costmodel.models import xla_cpu_cv, xla_cpu_programs
from xla_costmodel.models import xla_cpu_recipe as recipe
from xla_costmodel.studies import fleet_report as report
from xla_costmodel.studies.fleet_noise import PairNoise
from xla_costmodel.studies.fleet_report import F32, Runs, geomean
from xla_costmodel.studies.fleet_tuner import (
    SimProgram,
    load_target,
    noise_of,
    reuse,
    tune_model,
    tune_random,
)
from xla_costmodel.tpugraphs import xla_cpu2
from xla_costmodel.tpugraphs.knowledge import (
    FOREIGN_TRUST,
    Knowledge,
    ProgramRecord,
    record,
)

__all__ = ["geomean", "load_target", "priors", "simulate", "tune_model"]
DATA = paths.XLA_CPU_DATA
HISTORIES = (0, 5, 10, 20)
BUDGETS = (8,)
FLEET_K = 8  # the first fleet's budget, and the second's (reuse)
RANDOM_BUDGETS = (1, 2, 4, 8, 16, 32, 64)  # random's curve, for the budget to match
ORDERS = 20
RANDOM_DRAWS = 4  # random runs per (order, program, budget)


def targets(data: Path, spec: str = xla_cpu2.SPEC) -> dict[str, list[SimProgram]]:
    return {d.name: load_target(d, spec) for d in sorted(data.iterdir()) if d.is_dir()}


def fixed_row(history: Sequence[SimProgram]) -> F32 | None:
    if not history:
        return None
    progs = [
        xla_cpu_programs.Program(
            p.name, p.family, Path(), p.configs, p.runtimes, 0.0, None
        )
        for p in history
    ]
    return xla_cpu_programs.fixed_row(progs)[0]


def true_speedup(program: SimProgram, row: int) -> float:
    return float(program.runtimes[0] / program.runtimes[row])


def fixed_speedup(program: SimProgram, row: F32 | None) -> float:
    if row is None:
        return 1.0
    hits = np.flatnonzero((program.configs == row).all(1))
    return true_speedup(program, int(hits[0])) if hits.size else 1.0


def foreign_records(
    found: dict[str, list[SimProgram]], target: str
) -> list[tuple[str, ProgramRecord]]:
    """(family, record) of every program of the other targets, all their collected
    configs, at ``FOREIGN_TRUST``: what a shipped artifact knows of other CPUs."""
    out = []
    for name, programs in found.items():
        if name == target:
            continue
        for p in programs:
            rec = record(
                f"{name}/{p.name}",
                p.summary,
                p.configs,
                p.runtimes,
                p.configs[0],
                FOREIGN_TRUST,
            )
            if rec is not None:
                out.append((p.family, rec))
    return out


class Order:
    """One arrival order of one target: the two fleets, then the budget curves."""

    def __init__(
        self,
        programs: Sequence[SimProgram],
        foreign: Sequence[tuple[str, ProgramRecord]],
        priors: dict[str, F32] | None,
        noise: PairNoise,
        rng: np.random.Generator,
    ) -> None:
        self.programs, self.foreign, self.priors = programs, foreign, priors
        self.noise, self.rng = noise, rng
        self.default = programs[0].configs[0]
        self.order = [programs[i] for i in rng.permutation(len(programs))]

    def prior(self, p: SimProgram) -> F32 | None:
        return None if self.priors is None else self.priors[p.name][p.rows]

    def fleets(self, runs: Runs) -> dict[str, ProgramRecord]:
        """The first fleet along the order, then the second (reuse) after it."""
        seeds = [r for _, r in self.foreign]
        stored: list[ProgramRecord] = []
        by_name: dict[str, ProgramRecord] = {}
        first: dict[str, int] = {}
        for p in self.order:  # each tuned with everything before it
            knowledge = Knowledge.fit(seeds + stored, self.default)
            out, rec = tune_model(
                p, knowledge, self.prior(p), self.rng, self.noise, FLEET_K
            )
            first[p.name] = out.kept
            runs.reuse["first"].append(true_speedup(p, out.kept))
            if rec is not None:
                stored.append(rec)
                by_name[p.name] = rec
        knowledge = Knowledge.fit(seeds + stored, self.default)
        for p in self.order:
            decided, compiles, pairs = first[p.name], 0, 0
            kept = 0
            if decided:
                verdict = reuse(p, decided, self.rng, self.noise)
                compiles, pairs, kept = 1, verdict.pairs, decided if verdict.kept else 0
                runs.reuse["held"].append(float(verdict.kept))
            if not decided or not kept:
                out, _ = tune_model(
                    p,
                    knowledge,
                    self.prior(p),
                    self.rng,
                    self.noise,
                    FLEET_K,
                    first=[decided] if decided else (),
                )
                kept, compiles, pairs = out.kept, out.compiles, pairs + out.pairs
            runs.reuse["second"].append(true_speedup(p, kept))
            runs.reuse["compiles_decided" if decided else "compiles_rest"].append(
                compiles
            )
            runs.reuse["pairs"].append(pairs)
        return by_name

    def random_curve(self, budgets: Sequence[int], runs: Runs, o: int) -> None:
        for p in self.programs:
            for k in budgets:
                outs = [
                    tune_random(p, self.rng, self.noise, k) for _ in range(RANDOM_DRAWS)
                ]
                runs.random[(o, p.name, k)] = [true_speedup(p, x.kept) for x in outs]

    def budgets(
        self,
        by_name: dict[str, ProgramRecord],
        histories: Sequence[int],
        budgets: Sequence[int],
        runs: Runs,
        o: int,
    ) -> None:
        for h in histories:
            for p in self.programs:
                history = [q for q in self.order if q.family != p.family][:h]
                if len(history) < h:
                    continue
                recs = [r for fam, r in self.foreign if fam != p.family]
                recs += [by_name[q.name] for q in history if q.name in by_name]
                knowledge = Knowledge.fit(recs, self.default)
                for k in budgets:
                    out, _ = tune_model(
                        p, knowledge, self.prior(p), self.rng, self.noise, k
                    )
                    runs.model[(h, k)].append(
                        (
                            o,
                            p.name,
                            true_speedup(p, out.kept),
                            out.kept != 0,
                            out.pairs,
                            out.compiles,
                        )
                    )
                runs.fixed[h].append(fixed_speedup(p, fixed_row(history)))
                runs.oracle[h].append(float(p.runtimes[0] / p.runtimes.min()))
                runs.oracle_v1[h].append(p.oracle_v1)


def simulate_target(
    programs: Sequence[SimProgram],
    foreign: Sequence[tuple[str, ProgramRecord]],
    priors: dict[str, F32] | None,
    orders: int,
    histories: Sequence[int],
    seed: int,
    budgets: Sequence[int] = BUDGETS,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    noise = noise_of(programs)
    runs = Runs.empty(histories, budgets)
    curve = sorted({*budgets, *RANDOM_BUDGETS})
    for o in range(orders):
        order = Order(
            programs, foreign, priors, noise, np.random.default_rng([seed, o])
        )
        by_name = order.fleets(runs)
        order.random_curve(curve, runs, o)
        order.budgets(by_name, histories, budgets, runs, o)
        if progress:
            progress(f"order {o + 1}/{orders}")
    return {
        "programs": len(programs),
        "families": len({p.family for p in programs}),
        "noise": noise.summary(),
        **report.summarize(runs, histories, budgets, curve),
    }


def simulate(
    data: Path,
    *,
    quick: bool = False,
    orders: int = ORDERS,
    seed: int = 0,
    budgets: Sequence[int] = BUDGETS,
    priors: dict[str, dict[str, F32]] | None = None,
    progress: Callable[[str], None] | None = None,
    spec: str = xla_cpu2.SPEC,
) -> dict[str, Any]:
    start = time.monotonic()
    found = targets(data, spec)
    result: dict[str, Any] = {"budgets": list(budgets), "targets": {}, "spec": spec}
    for name, programs in found.items():
        if len(programs) < 2:
            continue
        if quick:  # a few programs of few families, few orders: seconds, for tests
            programs = sorted(programs, key=lambda p: p.name)[
                :: max(1, len(programs) // 12)
            ]
        result["targets"][name] = simulate_target(
            programs,
            foreign_records(found, name),
            None if priors is None else priors.get(name),
            3 if quick else orders,
            (0, 5) if quick else HISTORIES,
            seed,
            budgets,
            None if progress is None else report.prefixed(progress, name),
        )
    result["goals"] = report.goals(result)
    result["wall_s"] = round(time.monotonic() - start, 1)
    return result


def priors(data: Path, runs: Path, console: Console) -> dict[str, dict[str, F32]]:
    """Each program's prior: the scores of the recipe's model trained leaving its
    whole target out (``xla_cpu_recipe``'s target folds, from the cross-validation
    ``make train-xla-cpu`` ran and cached in ``runs``, or run now)."""
    programs = xla_cpu_programs.load_programs(data)
    folds = xla_cpu_cv.cross_validate(
        programs, recipe.recipe_config(), runs, console, kinds=("target",)
    )
    out: dict[str, dict[str, F32]] = {}
    for fold in folds:
        for key, scores in fold.scores.items():
            target, name = key.split("/", 1)
            out.setdefault(target, {})[name] = np.asarray(scores, np.float32)
    return out
