"""Ranking metrics with the official TpuGraphs definitions, and their baselines (numpy only).

Scores follow the service's convention: lower = predicted faster. Which metrics a
collection reports is its ``MetricSet``, declared in ``xla_costmodel.tpugraphs.collections``.

* **Top-K slowdown** (tile and xla_cpu, K = 1, 5, 10; layout "slowdown@K", K = 1, 10,
  100), as in the official ``top_error_performance`` (tiles) and ``layout_evaluate.py``: take the K
  configs with the lowest scores, the best *measured* runtime among them, and return
  ``best_of_top_k / true_best - 1``. 0 means the model's top-K contains a fastest config.
  K > C takes every config (so the slowdown is 0). Ties in scores are broken by config
  index (a stable sort); the official ``tf.argsort`` leaves the order of ties unspecified.
* **Kendall tau** (layout, xla_cpu): tau-b between scores and runtimes, as
  ``scipy.stats.kendalltau`` (its default variant) computes it, O(C log^2 C). It is NaN when the runtimes are all
  equal (nothing to rank) and 0.0 when the scores are all equal (no information, the
  random baseline's value); means skip NaNs.
* **Random baseline**: the exact expectation over uniformly random orders (no sampling):
  E[min of K draws without replacement] from the order statistics, and tau = 0.
* **Default baseline** (tile, xla_cpu): the default config, whose runtime is the
  normaliser, ranked first: ``normaliser / true_best - 1`` for every K (it names one
  config, so its tau is undefined). Layout npz files do not mark their default config,
  so there is no layout default baseline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class MetricSet:
    """The metrics of one collection (``xla_costmodel.tpugraphs.collections``): top-K
    slowdowns for ``ks`` under the key ``slowdown_key.format(k=k)``, and Kendall tau
    (key ``kendall_tau``, first) where ``kendall``. Calling it is the metric function."""

    ks: tuple[int, ...]
    slowdown_key: str
    kendall: bool

    @property
    def slowdown_keys(self) -> tuple[str, ...]:
        return tuple(self.slowdown_key.format(k=k) for k in self.ks)

    @property
    def keys(self) -> tuple[str, ...]:
        return (("kendall_tau",) if self.kendall else ()) + self.slowdown_keys

    def __call__(
        self, scores: npt.ArrayLike, runtimes: npt.ArrayLike
    ) -> dict[str, float]:
        out = {"kendall_tau": kendall_tau(scores, runtimes)} if self.kendall else {}
        for key, k in zip(self.slowdown_keys, self.ks, strict=True):
            out[key] = topk_slowdown(scores, runtimes, k)
        return out

    def random_baseline(self, runtimes: npt.ArrayLike) -> dict[str, float]:
        """The exact expectation over uniformly random orders (tau 0, NaN if the
        runtimes are all equal)."""
        out = {}
        if self.kendall:
            out["kendall_tau"] = 0.0 if np.ptp(np.asarray(runtimes)) > 0 else math.nan
        for key, k in zip(self.slowdown_keys, self.ks, strict=True):
            out[key] = expected_random_topk_slowdown(runtimes, k)
        return out

    def default_baseline(
        self, runtimes: npt.ArrayLike, default_runtime: float
    ) -> dict[str, float]:
        """The default config ranked first: ``default / true_best - 1`` for every K (it
        names one config, so tau is undefined: NaN)."""
        slowdown = float(default_runtime) / float(np.min(runtimes)) - 1.0
        out = {"kendall_tau": math.nan} if self.kendall else {}
        return {**out, **dict.fromkeys(self.slowdown_keys, slowdown)}

    def no_default(self, reason: str) -> dict[str, float | str | None]:
        """The default baseline's row where the files do not mark a default config."""
        return {**dict.fromkeys(self.keys), "reason": reason}


TILE_METRICS = MetricSet((1, 5, 10), "top{k}_slowdown", kendall=False)
LAYOUT_METRICS = MetricSet((1, 10, 100), "slowdown_at_{k}", kendall=True)
TILE_KEYS = TILE_METRICS.keys
LAYOUT_KEYS = LAYOUT_METRICS.keys
NO_LAYOUT_DEFAULT = "layout npz files do not mark which config is the compiler default"


def topk_slowdown(scores: npt.ArrayLike, runtimes: npt.ArrayLike, k: int) -> float:
    """Best measured runtime among the K lowest-scored configs over the true best, minus 1."""
    s, r = np.asarray(scores, np.float64), np.asarray(runtimes, np.float64)
    top = np.argsort(s, kind="stable")[:k]
    return float(r[top].min() / r.min() - 1.0)


def expected_random_topk_slowdown(runtimes: npt.ArrayLike, k: int) -> float:
    """Exact E[topk_slowdown] over uniformly random orders.

    With runtimes sorted ascending r_1..r_C, a random K-subset has minimum r_i (i-th in
    sorted order, ties broken by position) with probability C(C-i, K-1) / C(C, K).
    """
    r = np.sort(np.asarray(runtimes, np.float64))
    c = r.size
    k = min(k, c)
    i = np.arange(1, c + 1)
    valid = c - i >= k - 1
    log_p = np.full(c, -np.inf)
    iv = i[valid]
    log_p[valid] = (
        _log_comb(c - iv, k - 1) - _log_comb(np.array([c]), k)[0]
    )  # log C(C-i,K-1) - log C(C,K)
    expected_min = float(np.sum(np.exp(log_p) * r))
    return expected_min / float(r[0]) - 1.0


def _log_comb(n: npt.NDArray[np.int64], k: int) -> Array:
    lgamma = np.vectorize(math.lgamma, otypes=[np.float64])
    return np.asarray(lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1), np.float64)


def kendall_tau(scores: npt.ArrayLike, runtimes: npt.ArrayLike) -> float:
    """Kendall tau-b (ties handled), like ``scipy.stats.kendalltau``; see the module doc."""
    x, y = np.asarray(scores, np.float64), np.asarray(runtimes, np.float64)
    n = x.size
    if n < 2:
        return math.nan
    n0 = n * (n - 1) / 2
    ties_x, ties_y = _tied_pairs(x), _tied_pairs(y)
    if ties_y == n0:
        return math.nan
    if ties_x == n0:
        return 0.0
    order = np.lexsort((y, x))
    xs, ys = x[order], y[order]
    same_xy = (xs[1:] == xs[:-1]) & (ys[1:] == ys[:-1])
    ties_xy = _run_pairs(same_xy)
    # After sorting by (x, y), discordant pairs are exactly the strict inversions of y.
    discordant = _count_inversions(np.unique(ys, return_inverse=True)[1])
    concordant_minus_discordant = n0 - ties_x - ties_y + ties_xy - 2 * discordant
    return float(concordant_minus_discordant / math.sqrt((n0 - ties_x) * (n0 - ties_y)))


def _tied_pairs(v: Array) -> float:
    _, counts = np.unique(v, return_counts=True)
    return float(np.sum(counts * (counts - 1) / 2))


def _run_pairs(same_as_previous: npt.NDArray[np.bool_]) -> float:
    """Pairs within runs of equal neighbours, given ``a[i+1] == a[i]`` flags."""
    starts = np.flatnonzero(np.concatenate([[True], ~same_as_previous]))
    lengths = np.diff(np.concatenate([starts, [same_as_previous.size + 1]]))
    return float(np.sum(lengths * (lengths - 1) / 2))


def _count_inversions(ranks: npt.NDArray[np.int64]) -> float:
    """Pairs i < j with ranks[i] > ranks[j], by a bottom-up merge sort done with numpy.

    At width w the array is made of sorted blocks; tagging each value with its block
    pair id makes one global ``searchsorted`` count, for every right-block element, the
    left-block elements above it; one global sort then merges all pairs at once.
    """
    a = np.asarray(ranks, np.int64)
    n = a.size
    span = int(a.max()) + 1 if n else 1
    pos = np.arange(n)
    total = 0
    width = 1
    while width < n:
        pair = pos // (2 * width)
        is_left = (pos // width) % 2 == 0
        keys = pair * span + a
        left_keys = keys[is_left]
        right_keys = keys[~is_left]
        right_pair = pair[~is_left]
        left_start = np.searchsorted(pair[is_left], right_pair, side="left")
        left_end = np.searchsorted(pair[is_left], right_pair, side="right")
        at_most = np.searchsorted(left_keys, right_keys, side="right")
        total += int(np.sum(left_end - at_most.clip(left_start, left_end)))
        a = np.sort(keys) - pair * span  # pair ids are non-decreasing along pos
        width *= 2
    return float(total)


def mean_metrics(
    rows: Iterable[Mapping[str, float]], keys: Iterable[str]
) -> dict[str, float | None]:
    """Per-key mean over graphs, skipping NaN (undefined tau); None if nothing is left."""
    rows = list(rows)
    out: dict[str, float | None] = {}
    for key in keys:
        values = np.array([r[key] for r in rows], np.float64)
        values = values[~np.isnan(values)]
        out[key] = float(values.mean()) if values.size else None
    return out
