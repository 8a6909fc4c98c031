"""Paired runtimes of a config and the default: the statistics both sides compute.

    median_interval(ratios, level) -> (low, high)   distribution-free median bounds
    signed_rank_p(log_ratios) -> p                   one-sided exact Wilcoxon
    summarize(pairs_ns) -> PairedSummary              speedup, bounds, p, pairs

A tuner times the default and a config together in each pair (``clients/xla``), so
load that comes and goes hits both members alike and the per-pair ratio carries the
information. The service computes a stored decision's figures from the writer's own
pairs with the same code (``service/core/decisions.py``): a claimed speedup is never
taken on trust. numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

INTERVAL = 0.95  # two-sided level of the median speedup's interval
ALPHA = 0.05  # one-sided level at which a measured config counts as faster


@dataclass(frozen=True, kw_only=True)
class PairedSummary:
    """What ``pairs`` (default_ns, config_ns) say of the config."""

    speedup: float  # median over pairs of default / config
    speedup_low: float  # INTERVAL interval of that median
    speedup_high: float
    p_value: float  # one-sided signed-rank: the config is no faster
    pairs: int

    @property
    def faster(self) -> bool:
        """Measured faster: significant at ALPHA and a median speedup above 1."""
        return self.p_value <= ALPHA and self.speedup > 1.0

    @property
    def slower(self) -> bool:
        """Measured slower: the whole interval of the median below 1."""
        return self.speedup_high < 1.0


def median_interval(
    ratios: npt.ArrayLike, level: float = INTERVAL
) -> tuple[float, float]:
    """Distribution-free two-sided interval of the median of ``ratios``: the order
    statistics the sign test's binomial puts ``(1 - level) / 2`` outside on each
    side; the min and max when there are too few ratios for that level."""
    x = np.sort(np.asarray(ratios, np.float64))
    k = order(x.size, (1.0 - level) / 2)
    return float(x[k]), float(x[x.size - 1 - k])


def order(n: int, tail: float) -> int:
    """The 0-based order statistic ``i`` of the bound: the largest with
    P(Binomial(n, 1/2) <= i) <= tail; 0 (the min/max) when there is none."""
    i, cdf = -1, 0.0
    while i + 1 < n // 2:
        cdf += math.comb(n, i + 1) / 2.0**n
        if cdf > tail:
            break
        i += 1
    return max(0, i)


@lru_cache(maxsize=128)
def _signed_rank_tail(n: int) -> tuple[float, ...]:
    """P(W+ >= w) for w = 0..n(n+1)/2 under the null: exact, by counting subsets."""
    counts = np.zeros(n * (n + 1) // 2 + 1, np.float64)
    counts[0] = 1.0
    for r in range(1, n + 1):
        counts[r:] = counts[r:] + counts[:-r].copy()
    tail = np.cumsum(counts[::-1])[::-1] / 2.0**n
    return tuple(float(t) for t in tail)


def signed_rank_p(log_ratios: Sequence[float] | npt.ArrayLike) -> float:
    """One-sided exact Wilcoxon signed-rank p (H1: the ratios lean positive); zero
    differences dropped, ties given mid-ranks (then the exact null is approximate)."""
    r = np.asarray(log_ratios, np.float64)
    r = r[r != 0]
    if r.size == 0:
        return 1.0
    a = np.abs(r)
    ranks = np.empty(r.size, np.float64)
    ranks[np.argsort(a, kind="stable")] = np.arange(1, r.size + 1)
    if np.unique(a).size < a.size:  # mid-ranks for ties
        for v in np.unique(a):
            at = a == v
            ranks[at] = ranks[at].mean()
    w = float(ranks[r > 0].sum())
    tail = _signed_rank_tail(int(r.size))
    return tail[min(len(tail) - 1, math.floor(w + 1e-9))]  # ties: conservative


def summarize(pairs_ns: Sequence[tuple[int, int]] | npt.ArrayLike) -> PairedSummary:
    """The figures of ``pairs_ns`` [(default_ns, config_ns), ...], all positive."""
    arr = np.asarray(pairs_ns, np.float64).reshape(-1, 2)
    if arr.shape[0] == 0 or not np.all(arr > 0) or not np.all(np.isfinite(arr)):
        raise ValueError("pairs: expected positive (default_ns, config_ns) pairs")
    ratios = arr[:, 0] / arr[:, 1]
    low, high = median_interval(ratios)
    return PairedSummary(
        speedup=float(np.median(ratios)),
        speedup_low=low,
        speedup_high=high,
        p_value=signed_rank_p(np.log(ratios)),
        pairs=int(arr.shape[0]),
    )
