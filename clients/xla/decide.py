"""The final choice of a tuning run: keep a config only when it is faster, beyond noise.

The few configs measured fastest are timed again against the default in interleaved
pairs (each pair runs default and candidate in a random order, each ``runs`` times,
keeping the minimum; load that comes and goes hits both members of a pair alike).

``Sequential`` (what ``costmodel tune`` and the fleet simulation use) spends as many
pairs as the evidence needs. The statistic is the per-pair log ratio
``log(default / candidate)``; at each look (``looks``: ``min_pairs``, then about 25 %
more pairs each time, up to ``max_pairs``):

- **keep** when a one-sided Wilcoxon signed-rank test (exact null distribution) finds
  the candidate faster at this look's share of ``alpha`` *and* the median speedup
  exceeds ``1 + min_gain`` (pyperf's "minimum speed change": a real but tiny win is
  not worth a non-default configuration). The shares (``spend``) sum to ``alpha``, so
  by the union bound a candidate that is not faster is kept with probability at most
  ``alpha`` however many looks are taken: a quarter at the first look (only a clear
  win passes there), the rest spread over the later looks in proportion to the pairs
  they add;
- **stop, keep the default** when the one-sided upper confidence bound of the median
  speedup (binomial order statistics, level ``1 - FUTILITY``) is under
  ``1 + min_gain``: more pairs would not make it worth keeping;
- otherwise draw more pairs; at ``max_pairs`` the default stays.

``hold=True`` puts a stored decision on trial (reuse on another machine of the same
CPU, ``REUSE_MIN_GAIN``): it already passed this test where it was tuned, so the
burden is on refuting it. Undecided at ``max_pairs`` it is kept; the futility bound
(upper bound under ``1 + min_gain``, with ``min_gain`` 0: significantly slower)
drops it. Testing it again with the full burden would discard true gains at the
rate the test misses them (about one in four 3 % gains under this noise).

Signed ranks rather than Mann-Whitney: the pairs share drift, so their ratios carry
the information; ranks, because timing noise is heavy-tailed (the collected data's
same-executable ratios reach 8 robust standard deviations at the 1 % quantiles).
``compare``/``decide`` are the earlier fixed-n rule (Mann-Whitney on ``REPEATS``
pairs), kept for callers that have their pairs already. Every ``Verdict`` carries a
95 % distribution-free interval of the median speedup. No jax here; SciPy is
imported when ``compare`` is called.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from xla_costmodel.tpugraphs.paired import (
    median_interval,
    signed_rank_p,
)
from xla_costmodel.tpugraphs.paired import order as _order

ALPHA = 0.05
MIN_GAIN = 0.02
REPEATS = 7  # fixed-n pairs per candidate (compare/decide): p can reach 0.0003 at 7
MIN_PAIRS = 7  # the first look: all 7 pairs faster gives p = 1/128
MAX_PAIRS = 64  # the cap per candidate (studies/README.md: how it was chosen)
FIRST_SPEND = 0.25  # share of alpha spent at the first look
FUTILITY = 0.05  # one-sided level of the upper bound that stops a hopeless test
REUSE_MIN_GAIN = 0.0  # a stored decision holds while it is not shown slower


@dataclass(frozen=True)
class Verdict:
    """One candidate's comparison with the default."""

    speedup: float  # median over pairs of default / candidate
    p_value: float  # one-sided (candidate faster); Sequential: signed-rank, last look
    kept: bool
    speedup_low: float  # 95 % interval of the median speedup (min/max when too few)
    speedup_high: float
    pairs: int


def looks(min_pairs: int = MIN_PAIRS, max_pairs: int = MAX_PAIRS) -> list[int]:
    """The pair counts at which ``Sequential`` decides: about 25 % more each time."""
    if not 2 <= min_pairs <= max_pairs:
        raise ValueError(
            f"need 2 <= min_pairs <= max_pairs, got {min_pairs}, {max_pairs}"
        )
    out = [min_pairs]
    while out[-1] < max_pairs:
        out.append(min(max_pairs, max(out[-1] + 2, round(out[-1] * 1.25))))
    return out


def spend(at: Sequence[int], alpha: float = ALPHA) -> list[float]:
    """The share of ``alpha`` each look may spend (module docstring); they sum to it."""
    if len(at) == 1:
        return [alpha]
    first = alpha * FIRST_SPEND
    added = np.diff(np.asarray(at, np.float64))
    return [first, *(float(a) for a in (alpha - first) * added / added.sum())]


class Sequential:
    """One candidate against the default, a pair at a time (module docstring).

    ``add(default_ns, candidate_ns)`` one pair timed together; ``verdict`` is None
    while undecided, then fixed; ``done`` says whether to stop. ``final()`` is the
    verdict now, deciding at the pairs so far when the caller must stop early.
    """

    def __init__(
        self,
        alpha: float = ALPHA,
        min_gain: float = MIN_GAIN,
        min_pairs: int = MIN_PAIRS,
        max_pairs: int = MAX_PAIRS,
        *,
        hold: bool = False,
    ) -> None:
        self.min_gain, self.hold = min_gain, hold
        self.at = looks(min_pairs, max_pairs)
        self.levels = dict(zip(self.at, spend(self.at, alpha), strict=True))
        self.log_ratios: list[float] = []
        self.verdict: Verdict | None = None
        self.p_value = 1.0

    @property
    def done(self) -> bool:
        return self.verdict is not None

    @property
    def pairs(self) -> int:
        return len(self.log_ratios)

    def add(self, default_ns: float, candidate_ns: float) -> Verdict | None:
        """One more pair; the verdict once it is decided (then more pairs are ignored)."""
        if self.verdict is not None:
            return self.verdict
        if default_ns <= 0 or candidate_ns <= 0:
            raise ValueError("times must be positive")
        self.log_ratios.append(math.log(default_ns / candidate_ns))
        n = len(self.log_ratios)
        if n not in self.levels:
            return None
        self.p_value = signed_rank_p(self.log_ratios)
        ratios = np.exp(self.log_ratios)
        speedup = float(np.median(ratios))
        if self.p_value <= self.levels[n] and speedup > 1.0 + self.min_gain:
            return self._decide(True)
        upper = float(np.sort(ratios)[n - 1 - _order(n, FUTILITY)])
        if upper < 1.0 + self.min_gain:
            return self._decide(False)
        if n >= self.at[-1]:
            return self._decide(self.hold)
        return None

    def final(self) -> Verdict:
        """The verdict; undecided (the caller stopped early): the default stays."""
        if self.verdict is None:
            if not self.log_ratios:
                return Verdict(1.0, 1.0, False, 1.0, 1.0, 0)
            self.p_value = signed_rank_p(self.log_ratios)
            return self._decide(False)
        return self.verdict

    def _decide(self, kept: bool) -> Verdict:
        ratios = np.exp(self.log_ratios)
        low, high = median_interval(ratios)
        self.verdict = Verdict(
            float(np.median(ratios)), self.p_value, kept, low, high, len(ratios)
        )
        return self.verdict


def sequential(
    draw_pair: Callable[[], tuple[float, float]],
    alpha: float = ALPHA,
    min_gain: float = MIN_GAIN,
    min_pairs: int = MIN_PAIRS,
    max_pairs: int = MAX_PAIRS,
    *,
    hold: bool = False,
) -> Verdict:
    """``Sequential`` driven by ``draw_pair() -> (default_ns, candidate_ns)``."""
    test = Sequential(alpha, min_gain, min_pairs, max_pairs, hold=hold)
    while not test.done:
        test.add(*draw_pair())
    return test.final()


def compare(
    default_ns: Sequence[float],
    candidate_ns: Sequence[float],
    alpha: float = ALPHA,
    min_gain: float = MIN_GAIN,
) -> Verdict:
    """Fixed n: ``default_ns[i]`` and ``candidate_ns[i]`` were timed in the same pair;
    one-sided Mann-Whitney U at ``alpha`` and the minimum gain."""
    from scipy.stats import mannwhitneyu

    d = np.asarray(default_ns, np.float64)
    c = np.asarray(candidate_ns, np.float64)
    if d.size == 0 or d.shape != c.shape or (d <= 0).any() or (c <= 0).any():
        raise ValueError("default_ns and candidate_ns: equal, non-empty, positive")
    ratios = d / c
    speedup = float(np.median(ratios))
    low, high = median_interval(ratios)
    if d.size < 2 or np.ptp(np.concatenate([d, c])) == 0:
        return Verdict(speedup, 1.0, False, low, high, int(d.size))
    p = float(mannwhitneyu(c, d, alternative="less").pvalue)
    kept = p < alpha and speedup > 1.0 + min_gain
    return Verdict(speedup, p, kept, low, high, int(d.size))


def best(verdicts: Sequence[Verdict]) -> int | None:
    """The kept verdict with the largest median speedup (None: the default stays)."""
    passing = [k for k, v in enumerate(verdicts) if v.kept]
    return max(passing, key=lambda k: verdicts[k].speedup) if passing else None


def decide(
    default_ns: Sequence[Sequence[float]],
    candidates_ns: Sequence[Sequence[float]],
    alpha: float = ALPHA,
    min_gain: float = MIN_GAIN,
) -> tuple[int | None, list[Verdict]]:
    """Fixed n: the index of the candidate to keep (None: the default) and every
    verdict; ``default_ns[k]`` are the default's times paired with ``candidates_ns[k]``."""
    verdicts = [
        compare(d, c, alpha, min_gain)
        for d, c in zip(default_ns, candidates_ns, strict=True)
    ]
    return best(verdicts), verdicts
