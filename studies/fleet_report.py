"""The fleet simulation's figures: rows per (history, budget), random's curve and the
budget it needs to match the model, the second fleet's reuse, the goals, the table
and the plot (``studies.fleet`` runs, this module sums up; no simulation here).
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
REGRESSION = 0.02
GOAL_TARGET_PROGRAMS = 30
MATCH_AT = (2, 4)  # the model budgets random is matched against
GOAL_HISTORIES = (0, 10)
# One model run: (order, program, true speedup, kept a config, pairs, compiles).
ModelRun = tuple[int, str, float, bool, int, int]


@dataclass
class Runs:
    """Everything one target's orders measured (``studies.fleet.Order`` fills it)."""

    model: dict[tuple[int, int], list[ModelRun]]  # (history, K)
    random: dict[tuple[int, str, int], list[float]]  # (order, program, K): draws
    fixed: dict[int, list[float]]
    oracle: dict[int, list[float]]
    reuse: dict[str, list[float]]
    oracle_v1: dict[int, list[float]]

    @classmethod
    def empty(cls, histories: Sequence[int], budgets: Sequence[int]) -> Runs:
        return cls(
            {(h, k): [] for h in histories for k in budgets},
            {},
            {h: [] for h in histories},
            {h: [] for h in histories},
            defaultdict(list),
            {h: [] for h in histories},
        )


def geomean(values: Sequence[float]) -> float:
    return float(np.exp(np.mean(np.log(values)))) if len(values) else float("nan")


def _random_at(runs: Runs, keys: Sequence[tuple[int, str]], k: int) -> float:
    return geomean([geomean(runs.random[(o, n, k)]) for o, n in keys])


def _row(
    runs: Runs, h: int, k: int, r: Sequence[ModelRun], keys: Sequence[tuple[int, str]]
) -> dict[str, Any]:
    """One (history, budget) row: the model's runs ``r`` against the baselines."""
    speed = [s for _, _, s, *_ in r]
    kept = [s for _, _, s, kept, *_ in r if kept]
    draws = [s for key in keys for s in runs.random[(*key, k)]]
    return {
        "history": h,
        "K": k,
        "model": geomean(speed),
        "random": _random_at(runs, keys, k),
        "fixed": geomean(runs.fixed[h]),
        "oracle": geomean(runs.oracle[h]),
        "oracle_v1": geomean(runs.oracle_v1[h]),
        "regressions": float(np.mean([1 / s - 1 > REGRESSION for s in speed])),
        "random_regressions": float(np.mean([1 / s - 1 > REGRESSION for s in draws])),
        "kept": len(kept) / len(r),
        "slower_of_kept": float(np.mean([s < 1 for s in kept])) if kept else 0.0,
        "pairs": float(np.mean([x[4] for x in r])),
        "compiles": float(np.mean([x[5] for x in r])),
        "runs": len(r),
    }


def summarize(
    runs: Runs, histories: Sequence[int], budgets: Sequence[int], curve: Sequence[int]
) -> dict[str, Any]:
    rows, match = [], []
    for h in histories:
        keys: list[tuple[int, str]] = []
        for k in budgets:
            r = runs.model[(h, k)]
            if not r:
                continue
            keys = [(o, n) for o, n, *_ in r]
            rows.append(_row(runs, h, k, r, keys))
        if keys:
            points = [(k, _random_at(runs, keys, k)) for k in curve]
            for k in MATCH_AT:
                at = [x for x in rows if x["history"] == h and x["K"] == k]
                if at:
                    need = random_budget_to_match(points, at[0]["model"])
                    match.append(
                        {
                            "history": h,
                            "model_K": k,
                            "model": at[0]["model"],
                            "random_K": need,
                        }
                    )
    everyone = sorted({(o, n) for (o, n, _) in runs.random})
    return {
        "by_history": rows,
        "random_curve": [
            {"K": k, "random": _random_at(runs, everyone, k)} for k in curve
        ],
        "random_to_match": match,
        "reuse": reuse_summary(runs.reuse),
    }


def random_budget_to_match(
    points: Sequence[tuple[int, float]], level: float
) -> float | None:
    """The budget at which random's curve first reaches ``level``, interpolated
    linearly in log budget between the two budgets around it; None when it never
    does within the curve (``RANDOM_BUDGETS``: up to 64)."""
    prev: tuple[int, float] | None = None
    for k, v in points:
        if v >= level:
            if prev is None:
                return float(k)
            k0, v0 = prev
            t = (level - v0) / (v - v0)
            return float(np.exp2(np.log2(k0) + t * (np.log2(k) - np.log2(k0))))
        prev = (k, v)
    return None


def reuse_summary(r: dict[str, list[float]]) -> dict[str, Any]:
    """The second fleet against the first (``studies.fleet``'s docstring)."""
    if not r.get("first"):
        return {}
    first, second = geomean(r["first"]), geomean(r["second"])
    decided = r.get("compiles_decided", [])
    rest = r.get("compiles_rest", [])
    return {
        "first": first,
        "second": second,
        "second_over_first": second / first,
        "second_regressions": float(
            np.mean([1 / s - 1 > REGRESSION for s in r["second"]])
        ),
        "decided_share": len(decided) / len(r["first"]),
        "verified_held": float(np.mean(r["held"])) if r.get("held") else None,
        "compiles_where_decided": float(np.mean(decided)) if decided else None,
        "compiles_elsewhere": float(np.mean(rest)) if rest else None,
        "compiles_per_program": float(np.mean([*decided, *rest])),
        "pairs_per_program": float(np.mean(r["pairs"])),
    }


def goals(result: dict[str, Any]) -> dict[str, Any]:
    """Issue 28's goals (and issue 26's reuse goals) per target with at least
    ``GOAL_TARGET_PROGRAMS`` programs, at h = 0 and 10; a goal whose budgets were not
    simulated is left out."""
    out: dict[str, Any] = {}
    for name, t in result["targets"].items():
        if t["programs"] < GOAL_TARGET_PROGRAMS:
            continue
        rows = [r for r in t["by_history"] if r["history"] in GOAL_HISTORIES]
        at = {(r["history"], r["K"]): r for r in rows}
        rand = {(r["history"], r["K"]): r["random"] for r in rows}
        g: dict[str, bool] = {}
        for mk, rk in ((2, 8), (4, 16)):
            pairs = [
                (at[(h, mk)]["model"], rand.get((h, rk)))
                for h in GOAL_HISTORIES
                if (h, mk) in at
            ]
            if pairs and all(v is not None for _, v in pairs):
                g[f"model{mk}_ge_random{rk}"] = all(
                    m >= v for m, v in pairs if v is not None
                )
        top = [r for r in rows if r["K"] == 16]
        if top:
            g["model16_ge_75pct_oracle_gain"] = all(
                r["model"] - 1 >= 0.75 * (r["oracle"] - 1) for r in top
            )
        for h in GOAL_HISTORIES:
            curve = [r["model"] for r in rows if r["history"] == h]
            g.setdefault("model_nondecreasing_in_K", True)
            g["model_nondecreasing_in_K"] &= all(
                b >= a for a, b in itertools.pairwise(curve)
            )
        g["regressions_le_1pct"] = all(r["regressions"] <= 0.01 for r in rows)
        reuse = t.get("reuse") or {}
        if reuse.get("compiles_where_decided") is not None:
            g["reuse_compiles_le_1"] = reuse["compiles_where_decided"] <= 1.0
            g["reuse_ge_95pct"] = reuse["second_over_first"] >= 0.95
        out[name] = g
    return out


def prefixed(progress: Callable[[str], None], prefix: str) -> Callable[[str], None]:
    """``progress`` with every message prefixed (the target's name)."""
    return lambda message: progress(f"{prefix}: {message}")


def format_result(result: dict[str, Any]) -> str:
    lines = [
        "| target | programs | h | K | model | random | fixed | oracle | oracle xla_cpu/1 | regressions | pairs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, t in result["targets"].items():
        for r in t["by_history"]:
            lines.append(
                f"| {name} | {t['programs']} | {r['history']} | {r['K']} | "
                f"{r['model']:.3f} | {r['random']:.3f} | {r['fixed']:.3f} | "
                f"{r['oracle']:.3f} | {r['oracle_v1']:.3f} | {r['regressions']:.1%} | "
                f"{r['pairs']:.1f} |"
            )
    lines += [
        "",
        "| target | h | model K | random K to match | reuse: compiles where decided | second / first |",
        "|---|---|---|---|---|---|",
    ]
    for name, t in result["targets"].items():
        reuse = t["reuse"]
        for m in t["random_to_match"]:
            need = "> 64" if m["random_K"] is None else f"{m['random_K']:.1f}"
            cw = reuse.get("compiles_where_decided")
            lines.append(
                f"| {name} | {m['history']} | {m['model_K']} | {need} | "
                f"{'-' if cw is None else f'{cw:.2f}'} | {reuse.get('second_over_first', float('nan')):.3f} |"
            )
    return "\n".join(lines)


def dump(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=1)


def plot(result: dict[str, Any], path: Path, history: int = 10) -> str:
    """Speedup against compiles per target (model, random, fixed, oracle); what was
    written, or why nothing was. Per target at ``history`` (where the fixed set has
    programs to be chosen on), or the largest history below it at which every
    program ran (random's curve is over every program)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    names = list(result["targets"])
    fig, axes = plt.subplots(
        1, len(names), figsize=(3.6 * len(names), 3.4), squeeze=False
    )
    for ax, name in zip(axes[0], names, strict=True):
        t = result["targets"][name]
        h, rows = _plotted(t["by_history"], history)
        curve = t["random_curve"]
        ax.plot([r["K"] for r in rows], [r["model"] for r in rows], "o-", label="model")
        ax.plot(
            [c["K"] for c in curve], [c["random"] for c in curve], "s--", label="random"
        )
        if rows:
            ax.axhline(rows[0]["fixed"], color="grey", ls=":", label="fixed set")
            ax.axhline(rows[0]["oracle"], color="black", ls="-.", label="oracle")
        ax.set_xscale("log", base=2)
        ax.set_xticks([c["K"] for c in curve], [str(c["K"]) for c in curve])
        ax.set_title(f"{name}, {t['programs']} programs, h = {h}", fontsize=9)
        ax.set_xlabel("configs compiled (K)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("geomean speedup over the default")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"wrote {path}"


def _plotted(rows: list[dict[str, Any]], history: int) -> tuple[int, list[Any]]:
    """The history to plot and its rows (``plot``)."""
    everyone = max((r["runs"] for r in rows), default=0)
    full = sorted({r["history"] for r in rows if r["runs"] == everyone})
    h = max([x for x in full if x <= history] or full[:1] or [history])
    return h, [r for r in rows if r["history"] == h]
