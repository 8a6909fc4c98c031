"""Where a checkout keeps the data that training, collection and the studies read.

These tools run from the repository root (every ``make`` target does), so their default
paths are relative to the working directory, never to where a module happens to lie: an
installed package has no ``datasets/`` beside it. What the service
needs at run time ships as package data instead (``xla_costmodel.shipped_models``).
A default that is not there fails with one line naming the flag to pass (``existing``).
"""

from __future__ import annotations

from pathlib import Path

TPUGRAPHS = Path("datasets/tpugraphs")  # the TpuGraphs sample (MANIFEST.md there)
XLA_CPU_DATA = Path("datasets/xla_cpu")  # the collected xla_cpu dataset
ARTIFACTS = Path("models/artifacts")  # the shipped models (package data)
CHECKPOINTS = Path("models/checkpoints")  # PyTorch checkpoints (not shipped)
RUNS = Path("runs")  # epoch logs, CV folds and caches


class MissingData(SystemExit):
    """A data folder is not where the command looked: exits 1, printing what to pass."""


def existing(path: Path, flag: str, what: str) -> Path:
    """``path`` if it is a directory, else exit naming ``flag``."""
    if path.is_dir():
        return path
    raise MissingData(
        f"error: no {what} at {path} (relative to {Path.cwd()}); run from the "
        f"repository root or pass {flag} PATH"
    )
