"""The plot and the printed summary of ``xla_costmodel.studies.learning``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LINES = (
    ("slowdown", "model + adaptation", "o", "-"),
    ("model_slowdown", "model alone", "s", "--"),
    ("random_slowdown", "random (expected)", "^", ":"),
    ("per_graph_slowdown", "per-graph, no prior", "d", "-."),
)
# Slowdowns reach 0 once the best config is measured, so the y axis is symlog: linear
# from 0 up to the panel's smallest positive value (rounded down to a power of ten),
# logarithmic above, which spans both tile (1e-2 to 1) and unet (1e-5 to 1e-3).


def plot(result: dict[str, Any], path: Path) -> Path:
    """Best-found slowdown against configs measured: tile LOKO mean, the long tile
    curve, and unet."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tile, unet = result["tile"], result["layout"]["curve"]["per_round"]
    long = tile["long_curve"]
    panels = [
        (
            f"tile, leave-one-kernel-out, mean of {tile['protocol']['kernels']} "
            "kernels",
            tile["rounds"],
            True,
        )
    ]
    if long["means"]:
        names = ", ".join(k["kernel"].split("_")[0] for k in long["kernels"])
        panels.append((f"tile, long curve ({names}, held out)", long["means"], True))
    panels.append(("layout, unet_3d.4x4.bf16 (never trained on)", unet, False))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.4), dpi=110)
    for ax, (title, rows, default) in zip(axes, panels, strict=True):
        _panel(ax, title, rows, default)
    fig.suptitle(
        f"Best found slowdown vs configs measured ({result['mode']} run, "
        f"{result['metadata']['date']})",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _panel(ax: Any, title: str, rows: Sequence[dict[str, Any]], default: bool) -> None:
    from matplotlib.ticker import MaxNLocator

    x = [r["measured"] for r in rows]
    for key, label, marker, style in LINES:
        ax.plot(x, [r[key] for r in rows], marker=marker, linestyle=style, label=label)
    if default and rows and rows[0].get("default_slowdown") is not None:
        ax.axhline(
            rows[0]["default_slowdown"],
            color="black",
            linewidth=1,
            label="default config",
        )
    values = [r[k] for r in rows for k, *_ in LINES if r[k] is not None]
    values += [rows[0]["default_slowdown"]] if default and rows else []
    positive = [v for v in values if v is not None and v > 0] or [1.0]
    linthresh = 10.0 ** math.floor(math.log10(min(positive)))
    ax.set_yscale("symlog", linthresh=linthresh, linscale=0.5)
    ax.set_ylim(0, 2 * max(positive))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("configs measured")
    ax.set_ylabel(f"best found / true best - 1 (linear below {linthresh:.0e})")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def _f(v: Any, spec: str = ".4f") -> str:
    return "-" if v is None else format(v, spec)


def curve_table(
    rows: Sequence[dict[str, Any]], default: bool, tau: bool, spec: str = ".4f"
) -> list[str]:
    head = ["measured", "model+adapt", "model", "random", "per-graph"]
    head += ["default"] * default + ["tau adapted", "tau model"] * tau
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for r in rows:
        cells = [str(r["measured"])] + [_f(r[k], spec) for k, *_ in LINES]
        if default:
            cells.append(_f(r.get("default_slowdown"), spec))
        if tau:
            t = r.get("kendall_tau_unmeasured") or {}
            cells += [_f(t.get("adapted"), ".3f"), _f(t.get("model"), ".3f")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def summary(result: dict[str, Any]) -> str:
    tile, layout, t = result["tile"], result["layout"], result["timings"]
    head, meta = layout["headline"], result["metadata"]
    goal = tile["goal"]
    out = [
        f"learning curve, {result['mode']} mode, {result['wall_s']:.1f} s; "
        f"{meta['cpu_model']}, {meta['cores']} cores, commit {meta['git_commit'][:12]}",
        "",
        f"tile, leave-one-kernel-out ({tile['protocol']['kernels']} kernels), "
        "mean slowdown per round:",
    ]
    out += curve_table(tile["rounds"], default=True, tau=False)
    if goal["evaluated"]:
        out.append(
            f"goal after {goal['measured']}: {_f(goal['slowdown'])} <= default "
            f"{_f(goal['default_slowdown'])} and < random "
            f"{_f(goal['random_slowdown'])}: {'met' if goal['met'] else 'MISSED'}"
        )
    if tile["long_curve"]["means"]:
        out += [
            "",
            "tile, long curve (kernels with >= "
            f"{tile['long_curve']['min_configs']} configs):",
        ]
        out += curve_table(tile["long_curve"]["means"], default=True, tau=False)
    s0, rest = head["seed0"], head["seeds_1_to_n"]
    out += [
        "",
        f"unet headline (seed 0): tau adapted {s0['tau_adapted']:.3f} vs prior "
        f"{s0['tau_prior']:.3f} on {s0['ranked_rows']} rows; noise ceiling "
        f"{head['noise_ceiling']['tau']:.3f}",
    ]
    if rest["tau_adapted"]:
        a, p = rest["tau_adapted"], rest["tau_prior"]
        out.append(
            f"seeds 1..{rest['count']}: adapted mean {a['mean']:.3f} "
            f"[{a['min']:.3f}, {a['max']:.3f}], prior mean {p['mean']:.3f} "
            f"[{p['min']:.3f}, {p['max']:.3f}]"
        )
    out += ["", "unet replay curve:"]
    out += curve_table(layout["curve"]["per_round"], False, True, ".2e")
    out += ["", *_timing_lines(t), "", f"plot: {result['plot']}"]
    return "\n".join(out)


def _timing_lines(t: dict[str, Any]) -> list[str]:
    """The cost of learning: fit, rank and feedback latencies against their goals."""
    fit, rank, fb = t["fit"], t["rank"], t["feedback"]
    return [
        "timings (p50 / p90 ms):",
        f"  adapt.fit, {fit['measurements']} configs: "
        f"{fit['default_blas_threads']['p50_ms']:.2f} / "
        f"{fit['default_blas_threads']['p90_ms']:.2f} (goal <= "
        f"{fit['goal_ms']:.0f}: {'met' if fit['met'] else 'MISSED'}); one BLAS "
        f"thread: {fit['one_blas_thread']['p50_ms']:.2f} / "
        f"{fit['one_blas_thread']['p90_ms']:.2f}; the fit scores 1000 configs "
        f"in {fit['default_blas_threads']['score_1000_p50_ms']:.2f}",
        f"  rank {rank['configs']} configs, adapted: {rank['adapted']['p50_ms']:.2f} / "
        f"{rank['adapted']['p90_ms']:.2f}; prior: {rank['prior']['p50_ms']:.2f} / "
        f"{rank['prior']['p90_ms']:.2f}; ratio {rank['ratio_p50']:.2f} (goal <= "
        f"{rank['goal_ratio']}: {'met' if rank['met'] else 'MISSED'}); first "
        f"(refit) {rank['first_request_refit_ms']:.1f}",
        f"  feedback {fb['rows_per_request']} rows, sqlite: "
        f"{fb['sqlite']['p50_ms']:.2f} / {fb['sqlite']['p90_ms']:.2f}; postgresql: "
        f"{fb['postgresql']['p50_ms']:.2f} / {fb['postgresql']['p90_ms']:.2f}",
    ]
