"""``costmodel simulate [--quick] [--json]`` (``make xla-tuning``): the fleet simulation.

A fleet of tuners on one target, replayed from the collected runtimes of every
target under ``datasets/xla_cpu/<target>/``. Per target, programs arrive in random
orders (``orders``). Along each order the programs are tuned one after another by
the real policy, and what each run measured is stored, as the service stores
feedback: that is the target's history. Then every program is tuned at budget K = 8
after ``h`` programs of *other families* were tuned before it (h = 0, 5, 10, 20; the
first ``h`` of the order that are not of its family), with:

- ``model``: the real policy (``clients.xla.policy``: portfolio round, then adapted
  ranking with some exploration) over the service's own code path
  (``tpugraphs.blend``: artifact prior, the target's knowledge fitted on the history's
  stored measurements, per-graph adaptation, portfolio), and the real final decision
  (``clients.xla.decide``: interleaved repeats, Mann-Whitney and a 2 % minimum gain);
- ``random``: K configs drawn uniformly from the same candidates, same decision;
- ``fixed``: the one option set with the best geometric-mean runtime over the ``h``
  earlier programs (all their collected configs: generous to the baseline), applied
  as is, unmeasured, as a user applies one set everywhere (the default at h = 0);
- ``oracle``: the program's best collected config.

Measurements are drawn as the real tuner takes them: a config measured in a round is
the median of 3 of its collected rounds' minima drawn at random; the final decision
pairs default and candidate in the same collected rounds (shared drift, like
interleaving). The truth is each config's median over every collected round.
``regressions`` is the fraction of runs whose kept config is truly slower than the
default by more than 2 %. The prior is the artifact's scorer trained leaving the
whole target out (``--prior``; off in ``--quick``): the fleet meets a new CPU.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import typer
from rich.console import Console

from xla_costmodel import paths
from xla_costmodel.clients.xla import decide, policy
from xla_costmodel.models import xla_cpu_recipe as recipe
from xla_costmodel.tpugraphs.blend import Measured, blend
from xla_costmodel.tpugraphs.collections import XLA_CPU
from xla_costmodel.tpugraphs.knowledge import (
    FOREIGN_TRUST,
    Knowledge,
    ProgramRecord,
    record,
    summarize,
)
from xla_costmodel.tpugraphs.reader import load_npz

DATA = paths.XLA_CPU_DATA
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
HISTORIES = (0, 5, 10, 20)
K = 8
ORDERS = 20
RANDOM_DRAWS = 4  # random-8 runs per (order, history, program)
TUNE_ROUNDS = 3  # a measurement: median of this many rounds (TUNE_PROTOCOL)
CONFIRM = 2  # best configs taken to the final decision (TuneConfig.confirm)
REGRESSION = 0.02
GOAL_TARGET_PROGRAMS = 30


@dataclass(frozen=True)
class SimProgram:
    name: str
    family: str
    configs: F32  # [C, W], row 0 the default
    runtimes: F64  # [C] truth (median over rounds)
    rounds: npt.NDArray[np.int64]  # [C, R] per-round minima
    summary: F64


def load_target(folder: Path) -> list[SimProgram]:
    out = []
    for p in recipe.load_programs(folder):
        if p.round_min is None:
            continue
        graph = load_npz(p.path, XLA_CPU.name).graph
        out.append(
            SimProgram(
                p.name,
                p.family,
                p.configs,
                p.runtimes,
                p.round_min,
                summarize(graph.node_opcode),
            )
        )
    return out


def targets(data: Path) -> dict[str, list[SimProgram]]:
    return {d.name: load_target(d) for d in sorted(data.iterdir()) if d.is_dir()}


class Tuner:
    """The real policy over one program's collected rounds (module docstring)."""

    def __init__(self, program: SimProgram, rng: np.random.Generator) -> None:
        self.p, self.rng = program, rng
        self.rows: list[int] = []
        self.times: list[float] = []
        self.vs_default: dict[int, float] = {}  # as Rounds: vs the round's default
        self.default = 0.0

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

    def finish(self) -> int:
        """The final decision (``Rounds.decide``): the ``CONFIRM`` configs fastest
        against their round's default, if faster, each timed against the default in
        ``decide.REPEATS`` pairs of the same collected rounds; the kept row (0: the
        default)."""
        vs = self.vs_default
        cands = sorted((i for i in vs if vs[i] < 1), key=vs.__getitem__)[:CONFIRM]
        if not cands:
            return 0
        r = self.p.rounds.shape[1]
        pairs = [self.rng.choice(r, size=decide.REPEATS, replace=True) for _ in cands]
        chosen, _ = decide.decide(
            [self.p.rounds[0, idx] for idx in pairs],
            [self.p.rounds[i, idx] for i, idx in zip(cands, pairs, strict=True)],
        )
        return 0 if chosen is None else cands[chosen]


def tune_model(
    program: SimProgram,
    knowledge: Knowledge | None,
    prior: F32 | None,
    rng: np.random.Generator,
    foreign: bool = True,
) -> tuple[int, ProgramRecord | None]:
    t = Tuner(program, rng)
    taken = {0}

    def prior_of(rows: F32) -> F32:  # the prior's scores of rows of this program
        assert prior is not None
        return prior[
            [int(np.flatnonzero((program.configs == r).all(1))[0]) for r in rows]
        ]

    for step in policy.plan(K):
        t.round()
        rows = np.asarray(t.rows)
        measured = Measured(program.configs[rows], np.asarray(t.times))
        shaped = blend(
            program.configs,
            prior,
            knowledge,
            program.summary,
            measured,
            foreign=foreign,
            prior_of=None if prior is None else prior_of,
            portfolio=step.explore > 0,
            exclude=program.name,
        )
        ranking = np.argsort(shaped.scores, kind="stable")
        portfolio = None if shaped.portfolio is None else list(shaped.portfolio)
        for i in policy.pick(list(ranking), portfolio, step, sorted(taken)):
            taken.add(i)
            t.measure(i)
    return t.finish(), t.stored()


def tune_random(program: SimProgram, rng: np.random.Generator) -> int:
    t = Tuner(program, rng)
    n = len(program.configs)
    picks = rng.choice(np.arange(1, n), size=min(K, n - 1), replace=False)
    for part in np.array_split(picks, policy.ROUNDS):
        t.round()
        for i in part:
            t.measure(int(i))
    return t.finish()


def fixed_row(history: Sequence[SimProgram]) -> F32 | None:
    if not history:
        return None
    progs = [
        recipe.Program(p.name, p.family, Path(), p.configs, p.runtimes, 0.0, None)
        for p in history
    ]
    return recipe.fixed_row(progs)[0]


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


def simulate_target(
    programs: Sequence[SimProgram],
    foreign: Sequence[tuple[str, ProgramRecord]],
    priors: dict[str, F32] | None,
    orders: int,
    histories: Sequence[int],
    seed: int,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    default = programs[0].configs[0]
    runs: dict[int, dict[str, list[float]]] = {
        h: {"model": [], "random": [], "fixed": [], "oracle": [], "slow": []}
        for h in histories
    }
    for o in range(orders):
        rng = np.random.default_rng([seed, o])
        order = [programs[i] for i in rng.permutation(len(programs))]
        stored: list[ProgramRecord] = []
        by_name: dict[str, ProgramRecord] = {}
        for p in order:  # the fleet: each tuned with everything before it
            prior = None if priors is None else priors[p.name]
            seeds = [r for _, r in foreign]
            _, rec = tune_model(p, Knowledge.fit(seeds + stored, default), prior, rng)
            if rec is not None:
                stored.append(rec)
                by_name[p.name] = rec
        for h in histories:
            for p in programs:
                history = [q for q in order if q.family != p.family][:h]
                if len(history) < h:
                    continue
                recs = [r for fam, r in foreign if fam != p.family]
                recs += [by_name[q.name] for q in history if q.name in by_name]
                prior = None if priors is None else priors[p.name]
                kept, _ = tune_model(p, Knowledge.fit(recs, default), prior, rng)
                model = true_speedup(p, kept)
                rnd = [
                    true_speedup(p, tune_random(p, rng)) for _ in range(RANDOM_DRAWS)
                ]
                out = runs[h]
                out["model"].append(model)
                out["random"].append(geomean(rnd))
                out["fixed"].append(fixed_speedup(p, fixed_row(history)))
                out["oracle"].append(float(p.runtimes[0] / p.runtimes.min()))
                out["slow"].append(float(1.0 / model - 1.0 > REGRESSION))
        if progress:
            progress(f"order {o + 1}/{orders}")
    by_history = []
    for h in histories:
        r = runs[h]
        if not r["model"]:
            continue
        by_history.append(
            {
                "history": h,
                "K": K,
                "model": geomean(r["model"]),
                "random": geomean(r["random"]),
                "fixed": geomean(r["fixed"]),
                "oracle": geomean(r["oracle"]),
                "regressions": float(np.mean(r["slow"])),
                "runs": len(r["model"]),
            }
        )
    return {
        "programs": len(programs),
        "families": len({p.family for p in programs}),
        "by_history": by_history,
    }


def geomean(values: Sequence[float]) -> float:
    return float(np.exp(np.mean(np.log(values))))


def goals(result: dict[str, Any]) -> dict[str, Any]:
    """The issue's goals per target with at least ``GOAL_TARGET_PROGRAMS`` programs."""
    out: dict[str, Any] = {}
    for name, t in result["targets"].items():
        if t["programs"] < GOAL_TARGET_PROGRAMS:
            continue
        rows = t["by_history"]
        out[name] = {
            "model_ge_random_and_fixed": all(
                r["model"] >= max(r["random"], r["fixed"]) for r in rows
            ),
            "half_oracle_gain_from_h10": all(
                r["model"] - 1 >= 0.5 * (r["oracle"] - 1)
                for r in rows
                if r["history"] >= 10
            ),
            "regressions_le_1pct": all(r["regressions"] <= 0.01 for r in rows),
        }
    return out


def prefixed(progress: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    """``progress`` with every message prefixed (the target's name)."""
    return lambda message: progress(f"{prefix}: {message}")


def simulate(
    data: Path,
    *,
    quick: bool = False,
    orders: int = ORDERS,
    seed: int = 0,
    priors: dict[str, dict[str, F32]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    start = time.monotonic()
    found = targets(data)
    result: dict[str, Any] = {"targets": {}}
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
            None if progress is None else prefixed(progress, name),
        )
    result["goals"] = goals(result)
    result["wall_s"] = round(time.monotonic() - start, 1)
    return result


def format_result(result: dict[str, Any]) -> str:
    lines = [
        "| target | programs | families | h | model | random | fixed | oracle | regressions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, t in result["targets"].items():
        for r in t["by_history"]:
            lines.append(
                f"| {name} | {t['programs']} | {t['families']} | {r['history']} | "
                f"{r['model']:.3f} | {r['random']:.3f} | {r['fixed']:.3f} | "
                f"{r['oracle']:.3f} | {r['regressions']:.1%} |"
            )
    return "\n".join(lines)


def dump(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=1)


def priors(data: Path, runs: Path, console: Console) -> dict[str, dict[str, F32]]:
    """Each program's prior: the scores of the recipe's model trained leaving its
    whole target out (``xla_cpu_recipe``'s target folds, from the cross-validation
    ``make train-xla-cpu`` ran and cached in ``runs``, or run now)."""
    programs = recipe.load_programs(data)
    folds = recipe.cross_validate(
        programs, recipe.recipe_config(), runs, console, kinds=("target",)
    )
    out: dict[str, dict[str, F32]] = {}
    for fold in folds:
        for key, scores in fold.scores.items():
            target, name = key.split("/", 1)
            out.setdefault(target, {})[name] = np.asarray(scores, np.float32)
    return out


def simulate_cli(
    quick: bool = typer.Option(
        False, "--quick", help="A few programs and orders: seconds."
    ),
    json_: bool = typer.Option(False, "--json", help="Print one JSON object."),
    orders: int = typer.Option(
        ORDERS, "--orders", min=1, help="Arrival orders per target."
    ),
    seed: int = typer.Option(0, "--seed"),
    data: Path = typer.Option(
        DATA, "--data", help="The dataset: one folder per target."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Also write the JSON here (make xla-tuning: studies/results).",
    ),
    prior: bool = typer.Option(
        True,
        "--prior/--no-prior",
        help="The model's prior, trained leaving each target out (needs the train "
        "extra; cached in --runs). Off with --quick.",
    ),
    runs: Path = typer.Option(paths.RUNS / "xla_cpu" / "cv", "--runs"),
) -> None:
    """Fleet simulation: tuning each target's programs after others were tuned."""
    console = Console(stderr=True, quiet=json_)
    found = None if quick or not prior else priors(data, runs, console)
    result = simulate(
        data,
        quick=quick,
        orders=orders,
        seed=seed,
        priors=found,
        progress=None if json_ else console.print,
    )
    result["prior"] = found is not None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(dump(result) + "\n")
    typer.echo(dump(result) if json_ else format_result(result))
