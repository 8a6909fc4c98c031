"""The final choice of a tuning run: keep a config only when it is faster, beyond noise.

After the rounds, the few configs measured fastest are timed again against the
default in ``repeats`` interleaved pairs (each pair runs default and candidate in a
random order, each ``runs`` times, keeping the minimum; load that comes and goes
hits both members of a pair alike). A candidate is kept only if both say so:

- a one-sided Mann-Whitney U test (Google Benchmark's comparison; SciPy's exact
  distribution for small samples) finds the candidate's times lower than the
  default's at level ``alpha``;
- the median speedup (default / candidate over the pairs) exceeds ``1 + min_gain``
  (pyperf's "minimum speed change": a real but tiny win is not worth a non-default
  configuration).

Of the candidates that pass, the one with the largest median speedup is kept; none
passing keeps the default. ``costmodel tune`` and the fleet simulation (``costmodel
simulate``) both call ``decide``. No jax here; SciPy is imported when called.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05
MIN_GAIN = 0.02
REPEATS = 7  # interleaved pairs per candidate: p can reach 0.0003 (U exact) at 7


@dataclass(frozen=True)
class Verdict:
    """One candidate's comparison with the default."""

    speedup: float  # median over pairs of default / candidate
    p_value: float  # one-sided Mann-Whitney U, H1: candidate faster
    kept: bool


def compare(
    default_ns: Sequence[float],
    candidate_ns: Sequence[float],
    alpha: float = ALPHA,
    min_gain: float = MIN_GAIN,
) -> Verdict:
    """``default_ns[i]`` and ``candidate_ns[i]`` were timed in the same pair."""
    from scipy.stats import mannwhitneyu

    d = np.asarray(default_ns, np.float64)
    c = np.asarray(candidate_ns, np.float64)
    if d.size == 0 or d.shape != c.shape or (d <= 0).any() or (c <= 0).any():
        raise ValueError("default_ns and candidate_ns: equal, non-empty, positive")
    speedup = float(np.median(d / c))
    if d.size < 2 or np.ptp(np.concatenate([d, c])) == 0:
        return Verdict(speedup, 1.0, False)
    p = float(mannwhitneyu(c, d, alternative="less").pvalue)
    return Verdict(speedup, p, p < alpha and speedup > 1.0 + min_gain)


def decide(
    default_ns: Sequence[Sequence[float]],
    candidates_ns: Sequence[Sequence[float]],
    alpha: float = ALPHA,
    min_gain: float = MIN_GAIN,
) -> tuple[int | None, list[Verdict]]:
    """The index of the candidate to keep (None: the default) and every verdict;
    ``default_ns[k]`` are the default's times paired with ``candidates_ns[k]``."""
    verdicts = [
        compare(d, c, alpha, min_gain)
        for d, c in zip(default_ns, candidates_ns, strict=True)
    ]
    passing = [k for k, v in enumerate(verdicts) if v.kept]
    if not passing:
        return None, verdicts
    return max(passing, key=lambda k: verdicts[k].speedup), verdicts
