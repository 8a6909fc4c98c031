"""One program measured on several CPUs: the datasheet's "On other CPUs" section.

The dataset's targets (``datasets/xla_cpu/<target>/``) sample the same config rows, so a
program measured on two CPUs can be compared row by row. Rows are matched by content
in today's width (``specs.side_rows``), so a program collected in ``xla_cpu/1`` on
one CPU and in ``xla_cpu/2`` on another is compared over the configs both measured.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xla_costmodel.collection import specs


def _cpu(side: dict[str, Any]) -> str:
    m = side.get("machine", {})
    return f"{m.get('cpu_model')} family {m.get('cpu_family')} model {m.get('cpu_model_id')}"


def compare(here: dict[str, Any], there: dict[str, Any]) -> dict[str, float] | None:
    """One program measured on two CPUs: rows matched by config content (each
    sidecar's rows read in today's width, whatever spec sampled them), Spearman of
    their runtimes, and what each CPU's best config costs on the other."""
    a = _by_row(here)
    b = _by_row(there)
    common = [k for k in a if k in b]
    if len(common) < 3:
        return None
    x = np.array([a[k] for k in common], float)
    y = np.array([b[k] for k in common], float)
    rx = np.argsort(np.argsort(x)).astype(float)
    ry = np.argsort(np.argsort(y)).astype(float)
    spearman = float(np.corrcoef(rx, ry)[0, 1])
    return {
        "shared": len(common),
        "spearman": spearman,
        "default_ms_here": here["default_ms"],
        "default_ms_there": there["default_ms"],
        "best_over_default_here": here["best_over_default"],
        "best_over_default_there": there["best_over_default"],
        # the other CPU's best config, run here: its runtime over here's best
        "there_best_here": float(x[np.argmin(y)] / x.min()),
        "here_best_there": float(y[np.argmin(x)] / y.min()),
    }


def _row(
    target: str, here: dict[str, Any], there: dict[str, Any], c: dict[str, float]
) -> str:
    return (
        f"| {there['name']} | {target} | {c['shared']} | {c['spearman']:.3f} "
        f"| {c['default_ms_here']:.2f} / {c['default_ms_there']:.2f} "
        f"| {c['best_over_default_here']:.3f} / {c['best_over_default_there']:.3f} "
        f"| {c['there_best_here']:.3f} / {c['here_best_there']:.3f} "
        f"| {here['spec']} / {there['spec']} |"
    )


def _by_row(side: dict[str, Any]) -> dict[bytes, int]:
    """A measured sidecar's runtimes keyed by their row (today's width)."""
    rows = specs.side_rows(side)
    return {
        r.tobytes(): t for r, t in zip(rows, side["config_runtime_ns"], strict=True)
    }


def section(
    others: list[tuple[str, list[dict[str, Any]]]], ok: list[dict[str, Any]]
) -> list[str]:
    """The other targets' sidecars (``(target, sidecars)``), compared with this
    folder's measured programs ``ok``."""
    lines = ["## On other CPUs"]
    mine = {s["name"]: s for s in ok}
    compared = []
    for target, sides in others:
        for side in sides:
            if side["status"] == "ok" and side["name"] in mine:
                cmp = compare(mine[side["name"]], side)
                if cmp:
                    compared.append((target, side, cmp))
    if not compared:
        return [
            *lines,
            "Not measured: every file here comes from the one machine above. "
            "Treat runtimes as this machine's; re-run `make collect` on another CPU and "
            "compare per-program rankings before pooling.",
            "",
        ]
    # one line per other CPU: the folders may hold several machines of this kind
    seen: dict[str, dict[str, Any]] = {}
    for target, side, _ in compared:
        seen.setdefault(target, side)
    lines += [
        "The dataset's other targets (`../<target>/`) hold programs measured with the "
        "same protocol and config sample on other CPUs; the xla_cpu model trains on "
        "every target, each program relative to its own default.",
        "",
        *(
            f"- `{t}`: {_cpu(side)}; ISA flags {', '.join(side['machine'].get('isa_flags', []))}"
            for t, side in seen.items()
        ),
        "",
        "Per program, over the configs both measured (matched by content when the "
        "specs differ):",
        "",
        "| program | other CPU | configs | Spearman | default ms here / there "
        "| best/default here / there | other's best, run here / run there "
        "| spec here / there |",
        "|---|---|---|---|---|---|---|---|",
        *(_row(target, mine[side["name"]], side, c) for target, side, c in compared),
    ]
    lines += [
        "",
        '("other\'s best, run here": the runtime here of the config that was '
        "fastest on the other CPU, over the fastest here; 1.000 = the same winner.) "
        "Runtimes are each machine's own: measurements from another CPU are kept "
        "apart by their `target`, in the service as in this dataset.",
        "",
    ]
    return lines
