"""Bounded repeat-and-time helpers: every loop stops at a count and at a deadline."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Timings:
    """Wall-clock seconds of repeated calls (warm-up calls excluded)."""

    seconds: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def median_ms(self) -> float:
        return 1000.0 * self.median_s

    def rate(self, items: int) -> float:
        """Items per second at the median call time."""
        return items / self.median_s


def time_calls(
    fn: Callable[[], object],
    repeats: int,
    budget_s: float,
    warmup: int = 1,
    setup: Callable[[], object] | None = None,
) -> Timings:
    """Call ``fn`` ``warmup`` times untimed, then up to ``repeats`` times timed.

    ``setup``, when given, runs untimed before every call. Stops early once
    ``budget_s`` has passed (at least one timed call always runs), so a slow machine
    shortens a phase instead of overrunning the mode's time limit.
    """
    deadline = time.monotonic() + budget_s
    for _ in range(warmup):
        if setup is not None:
            setup()
        fn()
    seconds: list[float] = []
    for _ in range(max(1, repeats)):
        if setup is not None:
            setup()
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
        if time.monotonic() >= deadline:
            break
    return Timings(tuple(seconds))


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)
