"""A collection run's progress: its log file, the programs still pending, one summary
line per program.

Shared by the command (which logs worker restarts before any jax is imported) and by
the worker (which logs each program), so neither imports the other for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from xla_costmodel.collection import record
from xla_costmodel.collection.zoo import Program

Log = Callable[[str], None]


def make_log(path: Path) -> Log:
    """A log appending timestamped lines to ``path`` (its folder created)."""
    path.parent.mkdir(parents=True, exist_ok=True)

    def log(message: str) -> None:
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}"
        with open(path, "a") as f:
            f.write(line + "\n")

    return log


def pending(
    programs: Sequence[Program],
    out: Path,
    spec: str,
    recollect: Collection[str] = (),
) -> list[Program]:
    """Programs without a sidecar in ``out`` (a resumed run skips the others), and
    those named in ``recollect`` whose sidecar is of another spec than ``spec``.

    A folder may hold files of several specs: a run leaves another spec's files
    alone unless its caller names the programs to collect again (``collect
    --programs``), so a default run never replaces a whole folder's older files.
    """
    return [
        p
        for p in programs
        if not record.is_done(out, p.name)
        or (p.name in recollect and record.recorded_spec(out, p.name) != spec)
    ]


def summary_line(side: dict[str, Any]) -> str:
    if side["status"] != "ok":
        return f"{side['name']}: {side['status']} ({side.get('reason', '')})"
    return (
        f"{side['name']}: default {side['default_ms']:.2f} ms, best/default "
        f"{side['best_over_default']:.3f}, noise {side['noise']:.3f}, "
        f"{side['configs_measured']} configs, {len(side['compile_failures'])} failed, "
        f"{side['rounds']} rounds, {side['phase_s']['total']:.0f} s"
    )
