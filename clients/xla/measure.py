"""The measurement protocol: interleaved rounds over already-compiled executables.

On a shared machine a runtime drifts with whatever else runs, so no executable is
timed in one block. Every executable is compiled first; then each *round* visits all
of them in a fresh random order, and at each visit runs it once untimed (warm caches,
lazy initialisation) and ``runs`` times timed, keeping the minimum. A config's runtime
is the median of its per-round minima. Load that comes and goes hits every config in
turn instead of a contiguous block of them.

Separately compiled copies of the default config (controls) measure how far this
protocol disagrees with itself: ``disagreement`` = slowest / fastest control - 1.
No jax here: a runner is any callable that runs once and waits for the result.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from xla_costmodel.tpugraphs.labels import normalised_medians

Runner = Callable[[], object]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class TimingProtocol:
    """How much to measure. Rounds continue past ``min_rounds`` while the time spent
    is under ``budget_s``, up to ``max_rounds``."""

    runs: int = 3
    min_rounds: int = 3
    max_rounds: int = 5
    budget_s: float = 60.0
    noise_threshold: float = 0.05  # controls disagreeing beyond this re-measure
    attempts: int = 2  # measurements of one program before it is dropped


@dataclass(frozen=True)
class Measurement:
    round_min_ns: I64  # [E, R] minimum of the timed runs of each executable per round
    seconds: float

    @property
    def median_ns(self) -> I64:
        return np.asarray(np.median(self.round_min_ns, axis=1).round(), dtype=np.int64)

    @property
    def normalised_ns(self) -> I64:
        """``median_ns`` with per-round speed normalisation (``normalised_medians``)."""
        return normalised_medians(self.round_min_ns)

    @property
    def rounds(self) -> int:
        return int(self.round_min_ns.shape[1])


def time_once(runner: Runner, clock: Callable[[], int] = time.perf_counter_ns) -> int:
    start = clock()
    runner()
    return max(1, clock() - start)


def measure(
    runners: Sequence[Runner],
    protocol: TimingProtocol,
    rng: np.random.Generator,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> Measurement:
    """Shuffled round-robin rounds over ``runners`` (see the module docstring)."""
    started = time.monotonic()
    columns: list[list[int]] = []
    while len(columns) < protocol.max_rounds:
        if len(columns) >= protocol.min_rounds and (
            time.monotonic() - started >= protocol.budget_s
        ):
            break
        best = [0] * len(runners)
        for k in rng.permutation(len(runners)):
            runners[k]()  # warm run, untimed
            best[k] = min(time_once(runners[k], clock) for _ in range(protocol.runs))
        columns.append(best)
    table = np.array(columns, dtype=np.int64).T.reshape(len(runners), -1)
    return Measurement(table, time.monotonic() - started)


def disagreement(runtimes_ns: Sequence[int] | I64) -> float:
    """Slowest / fastest - 1 of the default controls' runtimes (0 for fewer than 2)."""
    values = np.asarray(runtimes_ns, dtype=np.float64)
    if values.size < 2:
        return 0.0
    return float(values.max() / values.min() - 1.0)
