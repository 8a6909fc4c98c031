"""Latency vs batch size (log-log) for the raw scorer, HTTP binary and HTTP JSON."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path


def latency_plot(
    sweep: Mapping[str, Mapping[int, float]], path: Path, subtitle: str
) -> Path:
    """``sweep``: series name -> {batch size: median ms}. Writes a PNG, returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for (name, points), marker in zip(sweep.items(), "osd^v", strict=False):
        sizes = sorted(points)
        ax.plot(sizes, [points[n] for n in sizes], marker=marker, label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("configs per request (tile, cached graph)")
    ax.set_ylabel("median latency (ms)")
    ax.set_title(f"Rank latency vs batch size\n{subtitle}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def sweep_table(
    sweep: Mapping[str, Mapping[int, float]], sizes: Sequence[int]
) -> list[dict[str, float | int | None]]:
    """Rows for the JSON: one per batch size, one column per series (ms)."""
    return [
        {"configs": n, **{name: points.get(n) for name, points in sweep.items()}}
        for n in sizes
    ]
