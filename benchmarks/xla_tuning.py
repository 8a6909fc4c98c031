"""``python -m xla_costmodel.benchmarks.xla_tuning [--json]`` (``make xla-tuning``): what
tuning XLA:CPU options with the xla_cpu model gains on families it never saw.

Every program of the collection is tuned by the fold model of
``xla_costmodel.models.xla_cpu_recipe`` that was trained without its family (the
recipe's cross-validation, reused from its cache when the data and recipe are
unchanged). The tuner is simulated on the collected runtimes, with K = 4, 8, 16
measurements per program besides the default, which is always measured too:

- ``model``: rank the program's collected configs with the fold model; measure the
  top ``ROUND`` not measured yet, refit ``tpugraphs.adapt.fit`` on everything
  measured so far (the default included) with the model's scores as prior, as the
  service does from ``MIN_ADAPT`` measurements, rank again, until K are measured;
- ``model_prior``: the model's top K, no adaptation (what adaptation adds);
- ``random``: K uniformly random collected configs;
- ``fixed``: the one option set with the best geometric-mean runtime/default on the
  fold's training families, one measurement;
- ``oracle``: the best of all collected configs (no measurement noise, no rule).

A measurement is taken as the real tuner takes one: the median of 3 of the
collection's rounds for that config, drawn at random (``round_min_ns``: the minimum of
its timed runs in each round), not the median over every round that the truth is, so
the tuner decides on noisy numbers. As the real tuner does, the two configs measured
fastest (if faster than the default) are measured again beside the default, and the
fastest is kept only if the default is more than max(2 %, the program's noise) slower
(noise: how far the default's separately compiled copies disagreed). A strategy's
result is the true (median) runtime of the default over that of the config it kept;
per program the geometric mean over seeds, then the geometric mean over programs.
``slower`` counts (program, K, seed) runs whose kept config is truly slower than the
default beyond the noise.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console

from xla_costmodel.models import xla_cpu_recipe as recipe
from xla_costmodel.tpugraphs import adapt, machine

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results"
KS = (4, 8, 16)
ROUND = 4  # configs measured per round
MIN_ADAPT = 4  # the service's COSTMODEL_ADAPT_MIN_MEASUREMENTS default
# As the real tuner (clients/xla/tune_rounds.py): a measurement is the median of 3
# rounds (TUNE_PROTOCOL.min_rounds), the best 2 are measured again before choosing,
# and a win must exceed max(2 %, the program's noise).
TUNE_ROUNDS = 3
CONFIRM = 2
NOISE_FLOOR = 0.02
MODEL_SEEDS = 20  # measurement-noise draws per program and K
RANDOM_SEEDS = 200
GOAL_K = 8
GOAL_OF_ORACLE = 0.9
STRATEGIES = ("model", "model_prior", "random", "fixed", "oracle")
Measure = Callable[[int], float]


def measurer(program: recipe.Program, rng: np.random.Generator) -> Measure:
    """One measurement of config ``i`` as the tuner takes it (``TUNE_PROTOCOL``): the
    median of ``TUNE_ROUNDS`` random rounds' minima (the median if the sidecar kept
    no rounds)."""
    if program.round_min is None:
        return lambda i: float(program.runtimes[i])
    rounds = program.round_min.shape[1]
    take = min(TUNE_ROUNDS, rounds)

    def measure(i: int) -> float:
        picks = rng.choice(rounds, size=take, replace=False)
        return float(np.median(program.round_min[i, picks]))

    return measure


def keep(
    program: recipe.Program, measured: dict[int, float], measure: Measure | None = None
) -> int:
    """The tuner's choice (``tune_rounds.Rounds.decide``): the ``CONFIRM`` configs
    measured fastest, if faster than the default, are measured again beside the
    default (with ``measure``), and the fastest is kept if the default is more than
    ``max(NOISE_FLOOR, noise)`` slower than it; otherwise the default (0)."""
    best = sorted((i for i in measured if i != 0 and measured[i] < measured[0]),
                  key=measured.__getitem__)[:CONFIRM]  # fmt: skip
    if not best:
        return 0
    if measure is None:
        final, default = {i: measured[i] for i in best}, measured[0]
    else:
        final, default = {i: measure(i) for i in best}, measure(0)
    winner = min(final, key=final.__getitem__)
    beaten = default / final[winner] > 1.0 + max(NOISE_FLOOR, program.noise)
    return winner if beaten else 0


def tune_model(program: recipe.Program, prior: np.ndarray, k: int, measure: Measure,
               adapt_rounds: bool = True) -> int:  # fmt: skip
    """Rounds of ``ROUND``: rank (adapted from ``MIN_ADAPT`` measurements), measure."""
    measured = {0: measure(0)}
    while len(measured) - 1 < k:
        idx = list(measured)
        scores = prior
        if adapt_rounds and len(idx) >= MIN_ADAPT:
            runtimes = [measured[i] for i in idx]
            fitted = adapt.fit(program.configs[idx], runtimes, prior[idx])
            scores = fitted.score(program.configs, prior).astype(np.float64)
        order = [i for i in np.argsort(scores, kind="stable") if i not in measured]
        take = min(ROUND if adapt_rounds else k, k - len(measured) + 1, len(order))
        if take == 0:
            break
        measured.update((int(i), measure(int(i))) for i in order[:take])
    return keep(program, measured, measure)


def tune_random(program: recipe.Program, k: int, rng: np.random.Generator) -> int:
    measure = measurer(program, rng)
    picks = rng.choice(np.arange(1, len(program.runtimes)), min(k, len(program.runtimes) - 1),
                       replace=False)  # fmt: skip
    measured = {0: measure(0), **{int(i): measure(int(i)) for i in picks}}
    return keep(program, measured, measure)


def tune_fixed(
    program: recipe.Program, row: np.ndarray, rng: np.random.Generator
) -> int:
    idx = program.row_index(row)
    if not idx:  # the default itself, or a config this program could not compile
        return 0
    measure = measurer(program, rng)
    return keep(program, {0: measure(0), idx: measure(idx)}, measure)


def program_result(
    program: recipe.Program, prior: np.ndarray, row: np.ndarray, seed: int
) -> dict[str, Any]:
    """Per strategy and K: geometric-mean speedup over seeds, and slow runs."""
    rt = program.runtimes
    speed = lambda chosen: float(rt[0] / rt[chosen])  # noqa: E731
    out: dict[str, Any] = {"graph": program.name, "family": program.family,
                           "noise": program.noise, "default_ms": rt[0] / 1e6,
                           "oracle": speed(int(np.argmin(rt)))}  # fmt: skip
    fixed = [
        speed(tune_fixed(program, row, _rng(seed, program, s)))
        for s in range(MODEL_SEEDS)
    ]
    out["fixed"] = _geomean(fixed)
    slower: dict[str, int] = {}
    for name, seeds in (("model", MODEL_SEEDS), ("model_prior", MODEL_SEEDS),
                        ("random", RANDOM_SEEDS)):  # fmt: skip
        out[name] = {}
        for k in KS:
            runs = []
            for s in range(seeds):
                rng = _rng(seed, program, s, k)
                if name == "random":
                    runs.append(speed(tune_random(program, k, rng)))
                else:
                    chosen = tune_model(program, prior, k, measurer(program, rng),
                                        adapt_rounds=name == "model")  # fmt: skip
                    runs.append(speed(chosen))
            out[name][str(k)] = _geomean(runs)
            beyond = sum(1 for x in runs if 1.0 / x - 1.0 > program.noise)
            slower[f"{name}@{k}"] = beyond
            if name == "model":
                out.setdefault("model_worst", {})[str(k)] = min(runs)
    out["slower_beyond_noise"] = {k: v for k, v in slower.items() if v}
    return out


def _rng(seed: int, program: recipe.Program, *more: int) -> np.random.Generator:
    return np.random.default_rng([seed, *program.name.encode(), *more])


def _geomean(values: Sequence[float]) -> float:
    return float(np.exp(np.mean(np.log(values))))


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Geometric means over programs, the goal, and the never-slower check."""
    geo: dict[str, Any] = {s: {} for s in STRATEGIES}
    for k in map(str, KS):
        for s in ("model", "model_prior", "random"):
            geo[s][k] = _geomean([r[s][k] for r in rows])
        geo["fixed"][k] = _geomean([r["fixed"] for r in rows])
        geo["oracle"][k] = _geomean([r["oracle"] for r in rows])
    g = str(GOAL_K)
    model, oracle, random = geo["model"][g], geo["oracle"][g], geo["random"][g]
    goal = {"k": GOAL_K, "model": model, "oracle": oracle, "random": random,
            "fixed": geo["fixed"][g], "model_over_oracle": model / oracle,
            "gain_captured": (model - 1) / (oracle - 1) if oracle > 1 else None,
            "met": model >= GOAL_OF_ORACLE * oracle and model > random}  # fmt: skip
    slow = [(r["graph"], k, n) for r in rows for k, n in r["slower_beyond_noise"].items()
            if k.startswith("model@")]  # fmt: skip
    worst = min(
        (r["model_worst"][k], r["graph"], k) for r in rows for k in r["model_worst"]
    )
    never = {"model_runs_slower_beyond_noise": slow, "ok": not slow,
             "worst_model_speedup": {"speedup": worst[0], "graph": worst[1], "k": int(worst[2])}}  # fmt: skip
    return {"geomean_speedup": geo, "goal": goal, "never_slower": never}


def per_family(rows: Sequence[dict[str, Any]], k: str) -> dict[str, dict[str, float]]:
    fams = sorted({r["family"] for r in rows})
    pick = lambda r, s: r[s][k] if isinstance(r[s], dict) else r[s]  # noqa: E731
    return {f: {s: _geomean([pick(r, s) for r in rows if r["family"] == f])
                for s in STRATEGIES} for f in fams}  # fmt: skip


def plot(result: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    geo, fams = result["geomean_speedup"], result["per_family_k8"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), dpi=110,
                                      gridspec_kw={"width_ratios": [1, 2]})  # fmt: skip
    for s, marker in zip(STRATEGIES, "osd^v", strict=True):
        left.plot(KS, [geo[s][str(k)] for k in KS], marker=marker, label=s)
    left.set_xscale("log", base=2)
    left.set_xticks(KS, [str(k) for k in KS])
    left.set_xlabel("measurements K (besides the default)")
    left.set_ylabel("geometric-mean speedup over default")
    left.grid(True, alpha=0.3)
    left.legend(fontsize=8)
    names = list(fams)
    width = 0.8 / len(STRATEGIES)
    for j, s in enumerate(STRATEGIES):
        x = np.arange(len(names)) + (j - len(STRATEGIES) / 2 + 0.5) * width
        right.bar(x, [fams[f][s] for f in names], width, label=s)
    right.axhline(1.0, color="black", lw=0.8)
    right.set_yscale("log")
    right.set_xticks(np.arange(len(names)), names, rotation=30, ha="right", fontsize=8)
    right.set_ylabel(f"speedup at K = {GOAL_K} (geomean per family)")
    right.legend(fontsize=8, ncols=3)
    n = len(result["programs"])
    fig.suptitle(f"XLA:CPU option tuning on held-out families ({n} programs, "
                 f"{result['machine']['target']})", fontsize=10)  # fmt: skip
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def evaluate(
    data: Path, runs: Path, seed: int, epochs: int, console: Console
) -> dict[str, Any]:
    start = time.monotonic()
    programs = recipe.load_programs(data)
    cfg = recipe.recipe_config(seed, epochs)
    folds = recipe.cross_validate(programs, cfg, runs / "cv", console)
    cv_s = time.monotonic() - start
    by_name = {p.name: p for p in programs}
    rows = []
    for fold in folds:
        row = np.asarray(fold.fixed_row, np.float32)
        for name, scores in fold.scores.items():
            rows.append(program_result(by_name[name], np.asarray(scores), row, seed))
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**machine.describe(), "target": recipe.sidecar_target(data)},
        "data": str(data), "ks": list(KS), "round": ROUND, "min_adapt": MIN_ADAPT,
        "seeds": {"model": MODEL_SEEDS, "random": RANDOM_SEEDS}, "seed": seed,
        "fixed": {f.family: f.fixed_row for f in folds},
        **summarise(rows), "per_family_k8": per_family(rows, str(GOAL_K)),
        "programs": rows,
        "wall_s": {"cross_validation": round(cv_s, 1),
                   "simulation": round(time.monotonic() - start - cv_s, 1)},
    }  # fmt: skip


def format_result(result: dict[str, Any]) -> str:
    geo = result["geomean_speedup"]
    lines = [
        "| K | " + " | ".join(STRATEGIES) + " |",
        "|---" * (len(STRATEGIES) + 1) + "|",
    ]
    for k in map(str, KS):
        lines.append(
            f"| {k} | " + " | ".join(f"{geo[s][k]:.3f}" for s in STRATEGIES) + " |"
        )
    g, n = result["goal"], result["never_slower"]
    lines += [
        "",
        f"goal (K={g['k']}: model >= {GOAL_OF_ORACLE:.0%} of oracle and > random): "
        f"{'met' if g['met'] else 'missed'}; model/oracle {g['model_over_oracle']:.3f}, "
        f"model {g['model']:.3f} vs random {g['random']:.3f}, fixed {g['fixed']:.3f}",
        f"never slower than default beyond noise: {'yes' if n['ok'] else 'NO'} "
        f"(worst model run {n['worst_model_speedup']})",
    ]
    return "\n".join(lines)


def run(
    data: Annotated[
        Path, typer.Option(help="The collected xla_cpu folder.")
    ] = recipe.DATA,
    runs: Annotated[Path, typer.Option(help="Fold models and the CV cache.")] = REPO
    / "runs/xla_cpu",
    out: Annotated[Path, typer.Option(help="Where the JSON and the PNG go.")] = OUT,
    seed: int = 0,
    epochs: Annotated[int, typer.Option(help="The recipe's epochs.")] = recipe.EPOCHS,
    json_: Annotated[bool, typer.Option("--json", help="Print the JSON.")] = False,
) -> None:
    """Simulate tuning the held-out programs with the fold models; JSON + plot."""
    console = Console(stderr=True)
    data = Path(os.path.relpath(data.resolve()))
    result = evaluate(data, runs, seed, epochs, console)
    out.mkdir(parents=True, exist_ok=True)
    result["plot"] = str(plot(result, out / "xla_tuning.png"))
    (out / "xla_tuning.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1) if json_ else format_result(result))


def main() -> None:
    typer.run(run)


if __name__ == "__main__":
    main()
