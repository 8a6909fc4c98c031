"""Per-graph adaptation: a small ridge model fitted on one graph's measured configs.

An autotuner measures configs anyway; ``fit`` turns those measurements (plus, if
given, the learned model's scores for the same configs, the *prior*) into an
``Adapter`` that ranks the graph's other configs. numpy only, deterministic.

Method (chosen by ``python -m xla_costmodel.studies.adaptation``; see studies/README.md):

1. Repeated configs are merged: mean log runtime (and mean prior) per distinct config.
2. Target: a standardised monotone transform of log runtime, ``hybrid`` = mid-rank
   + robust z (median/MAD, clipped at +-CLIP), each standardised. Plain log runtime
   lets a few slow outliers own the squared loss (unet3d: 5% of its configs run 3x
   slower, the rest within 6%); plain ranks lose magnitudes tile kernels need.
3. Features: one indicator per (column, value) among the columns that vary in the
   measured configs; a value never measured contributes 0 at score time.
4. Prior: standardised with the measured configs' mean and std, entered as one
   more column whose slope is shrunk toward PRIOR_SLOPE = 1 with strength
   PRIOR_STRENGTH = 4 (as if 4 measurements had agreed with it): with 2 to 6
   measurements the prior dominates, with 50 or more the data set its weight.
5. Ridge with a fixed penalty RIDGE = 3 per one-hot weight, solved exactly after
   merging equal/complementary indicators (primal or dual, whichever is smaller).
6. Fewer than 2 distinct configs or equal runtimes: the (standardised) prior.

Study (10 seeds, leave-configs-out; layout = 3 graphs, 2 distinct unet graphs;
tile = 4 kernels at n = 2, 1 kernel (579 configs) from n = 20; the shipped tile
prior was trained on every tile kernel and the layout prior on unet3d, so the prior
is optimistic there). Kendall tau of the unmeasured configs by n measured:

    n measured                2     4     6    10    20    50   100
    layout prior only      .092  .094  .094  .086  .088  .095  .113
    layout log/no prior    .032  .070  .116  .136  .217  .260  .217
    layout hybrid/no prior .032  .087  .100  .122  .244  .412  .488
    layout chosen          .093  .107  .147  .161  .261  .413  .487
    tile   prior only      .877  .853  .866  .819  .772  .772  .771
    tile   hybrid/no prior .262  .267  .379  .415  .521  .750  .824
    tile   chosen          .877  .853  .867  .829  .809  .851  .865

Tile top-1 slowdown, prior vs chosen: n=2 .127/.118, n=4 .165/.155, n=6 .164/.124,
n=100 .372/.083. Rejected: GCV-chosen ridge (equal on layout, tile tau .762 at
n=50), prior as a plain feature (tile tau .753 at n=2), Hamming-RBF kernel ridge
(layout tau .121 vs .161 at n=10; O(n^3), seconds at 2,000 configs), log target
(layout .218 vs .487 at n=100). Adaptation is no worse than the prior from 4
distinct measurements (``blend.MIN_MEASUREMENTS`` = 4): tau and best
found after 1 and 5 more measurements; only the top-1 pick among layout configs
stays better with the prior until n = 50 (differences below 0.2%).

Headline, unet_3d.4x4.bf16 (held out from training), 50 random rows (seed 0) as
feedback, tau on the other 1,915 rows: 0.323 vs 0.071 for the prior alone. The
hoped-for 0.7 is out of reach on this graph: two measurements of the same config
agree only at tau 0.298 (runtimes span 1.6%, and 84% of the configs lie within
0.01% of the best); 0.68 is the in-sample tau on the 50 fitted rows.

Speed (2 cores, 2,000 perturbed 62-node unet configs, 578 one-hot features, median):
fit 8.8 ms (11.5 ms when every cell is perturbed), score of 1,000 configs 1.3 ms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Target = Literal["hybrid", "rank", "log"]

# The constants the study chose (module docstring). RIDGE: penalty on each one-hot
# weight, in measurements of the standardised target; PRIOR_SLOPE: the prior's weight
# before any measurement; PRIOR_STRENGTH: how many measurements that belief is worth;
# CLIP: where the robust z of log runtime is clipped, so slow outliers cannot dominate.
RIDGE = 3.0
PRIOR_SLOPE = 1.0
PRIOR_STRENGTH = 4.0
CLIP = 3.0


@dataclass(frozen=True)
class Adapter:
    """A fitted per-graph model: one-hot weights plus a scaled prior, plain numpy state.

    ``score(x, p) = sum_f weights[f] * (x[cols[f]] == values[f]) + offset
    + prior_slope * (p - prior_mean) / prior_scale``; lower = predicted faster.
    """

    config_shape: tuple[int, ...]  # a config's shape: (24,) tile, (NC, 18) layout
    measurements: int  # distinct configs used
    cols: I64  # [F] flattened config column of each one-hot feature
    values: F64  # [F] the value it tests for
    weights: F64  # [F]
    offset: float
    uses_prior: bool
    prior_mean: float = 0.0
    prior_scale: float = 1.0
    prior_slope: float = 0.0

    def score(self, configs: npt.ArrayLike, prior: npt.ArrayLike | None) -> np.ndarray:
        """Scores [M] float32, lower = predicted faster; ``prior`` iff fit had one."""
        flat = _configs(configs, "configs", self.config_shape)
        if (prior is not None) != self.uses_prior:
            raise ValueError(
                "prior: the adapter was fitted "
                + ("with" if self.uses_prior else "without")
                + " a prior, so score needs "
                + ("one" if self.uses_prior else "none")
            )
        out = np.full(flat.shape[0], self.offset, np.float64)
        if self.cols.size:
            out += (flat[:, self.cols] == self.values) @ self.weights
        if prior is not None:
            p = _vector(prior, "prior", flat.shape[0])
            out += self.prior_slope * (p - self.prior_mean) / self.prior_scale
        return out.astype(np.float32)


def fit(
    configs: npt.ArrayLike,
    runtimes_ns: npt.ArrayLike,
    prior: npt.ArrayLike | None,
    *,
    ridge: float = RIDGE,
    prior_slope: float = PRIOR_SLOPE,
    prior_strength: float = PRIOR_STRENGTH,
    target: Target = "hybrid",
) -> Adapter:
    """Fit on N measured configs ([N,24] tile or [N,NC,18] layout) of one graph.

    ``runtimes_ns`` [N] > 0; ``prior`` [N] the learned model's scores for the same
    configs (lower = faster), or None for a model of the measurements alone. Repeated
    configs are averaged (mean log runtime). With fewer than 2 distinct configs or all
    runtimes equal, the adapter returns the prior (standardised), or zeros without one.
    """
    arr = np.asarray(configs)
    if arr.ndim not in (2, 3):
        raise ValueError(
            f"configs: expected [N,24] or [N,NC,18], got shape {list(arr.shape)}"
        )
    flat = _configs(arr, "configs", arr.shape[1:])
    n_rows = flat.shape[0]
    if n_rows == 0:
        raise ValueError("configs: no configs given")
    log_rt = np.log(_vector(runtimes_ns, "runtimes_ns", n_rows, positive=True))
    p_rows = None if prior is None else _vector(prior, "prior", n_rows)
    for name, value in (("ridge", ridge), ("prior_strength", prior_strength)):
        if not np.isfinite(value) or value <= 0:
            raise ValueError(f"{name}: must be a finite number > 0, got {value}")
    if not np.isfinite(prior_slope):
        raise ValueError(f"prior_slope: must be finite, got {prior_slope}")
    if target not in ("hybrid", "rank", "log"):
        raise ValueError(f"target: expected hybrid, rank or log, got {target!r}")
    # Only columns that vary can tell configs apart: dedup and encode on those alone.
    varying = np.flatnonzero(flat.min(0) != flat.max(0))
    sub = np.ascontiguousarray(flat[:, varying], dtype=np.float64) + 0.0  # no -0.0
    if varying.size:
        uniq, y, p = _average_repeats(sub, log_rt, p_rows)
    else:  # one distinct config
        uniq, y = sub[:1], log_rt.mean(keepdims=True)
        p = None if p_rows is None else p_rows.mean(keepdims=True)
    shape, n = tuple(int(d) for d in arr.shape[1:]), int(uniq.shape[0])
    pm, ps = 0.0, 1.0
    if p is not None:
        pm, sd = float(p.mean()), float(p.std())
        ps = sd if sd > 0 else 1.0  # no spread measured: keep the prior's own units
    if n < 2 or np.ptp(y) == 0:  # nothing to learn from: the prior alone
        return _prior_only(shape, n, p is not None, pm, ps)
    z = regression_target(y, target)
    sub_cols, values, feats = _one_hot(uniq)
    zp = None if p is None else (p - pm) / ps
    w, offset, slope = _solve(
        feats, z, zp, ridge, prior_slope if p is not None else 0.0, prior_strength
    )
    cols = varying[sub_cols].astype(np.int64)
    return Adapter(shape, n, cols, values, w, offset, p is not None, pm, ps, slope)


def _prior_only(
    shape: tuple[int, ...], n: int, uses_prior: bool, pm: float, ps: float
) -> Adapter:
    empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0, np.float64)
    slope = 1.0 if uses_prior else 0.0
    return Adapter(shape, n, empty_i, empty_f, empty_f, 0.0, uses_prior, pm, ps, slope)


def _configs(
    value: npt.ArrayLike, name: str, shape: tuple[int, ...]
) -> np.ndarray[tuple[int, int], np.dtype[np.number]]:
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name}: expected a numeric array, got dtype {arr.dtype}")
    if arr.ndim != len(shape) + 1 or arr.shape[1:] != shape:
        want = "[" + ",".join(["M", *map(str, shape)]) + "]"
        raise ValueError(f"{name}: expected shape {want}, got {list(arr.shape)}")
    flat = arr.reshape(arr.shape[0], int(np.prod(shape)))
    if flat.dtype.kind == "f" and not np.isfinite(flat).all():
        raise ValueError(f"{name}: contains NaN or infinite values")
    return flat


def _vector(value: npt.ArrayLike, name: str, n: int, positive: bool = False) -> F64:
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name}: expected a numeric array, got dtype {arr.dtype}")
    if arr.shape != (n,):
        raise ValueError(f"{name}: expected shape [{n}], got {list(arr.shape)}")
    out = arr.astype(np.float64)
    if not np.isfinite(out).all():
        raise ValueError(f"{name}: contains NaN or infinite values")
    if positive and out.size and out.min() <= 0:
        raise ValueError(f"{name}: runtimes must be > 0")
    return out


def _average_repeats(
    flat: F64, log_rt: F64, prior: F64 | None
) -> tuple[F64, F64, F64 | None]:
    """Distinct configs (first-seen order), their mean log runtime and mean prior."""
    rows = np.ascontiguousarray(flat).view(np.dtype((np.void, flat.shape[1] * 8)))
    _, first, inverse = np.unique(rows.ravel(), return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # deterministic, input-order groups
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    group = rank[inverse.ravel()]
    counts = np.bincount(group).astype(np.float64)
    y = np.bincount(group, log_rt) / counts
    p = None if prior is None else np.bincount(group, prior) / counts
    return flat[first[order]], y, p


def regression_target(log_runtime: F64, target: Target = "hybrid") -> F64:
    """What the ridge predicts: a standardised monotone transform of log runtime.

    ``log``: log runtime; ``rank``: its mid-ranks; ``hybrid``: mid-ranks plus a robust
    z-score (median / MAD, clipped at +-CLIP), each standardised before the sum.
    """
    y = np.asarray(log_runtime, np.float64)
    if target == "log":
        return _standardise(y)
    ranks = _standardise(_mid_ranks(y))
    if target == "rank":
        return ranks
    med = float(np.median(y))
    mad = float(np.median(np.abs(y - med))) or float(np.mean(np.abs(y - med)))
    robust = np.clip((y - med) / (1.4826 * mad), -CLIP, CLIP) if mad > 0 else y * 0
    return _standardise(ranks + _standardise(robust))


def _mid_ranks(y: F64) -> F64:
    _, inverse, counts = np.unique(y, return_inverse=True, return_counts=True)
    mid = np.cumsum(counts) - (counts - 1) / 2.0
    return np.asarray(mid[inverse.ravel()], np.float64)


def _standardise(v: F64) -> F64:
    sd = float(v.std())
    return (v - v.mean()) / sd if sd > 0 else np.zeros_like(v)


def _one_hot(uniq: F64) -> tuple[I64, F64, npt.NDArray[np.bool_]]:
    """One indicator per value of each column of ``uniq`` (all of them vary).

    Returns the features' columns and values (grouped by column, values ascending)
    and the indicators transposed, [F, n]: gathering whole rows of ``uniq.T`` is
    several times faster than gathering columns of ``uniq``.
    """
    by_column = np.ascontiguousarray(uniq.T)
    ordered = np.sort(by_column, axis=1)
    new = np.ones_like(ordered, dtype=bool)
    new[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    cols, pos = np.nonzero(new)
    values = ordered[cols, pos]
    return cols, values, by_column[cols] == values[:, None]


def _solve(
    feats_t: npt.NDArray[np.bool_],
    z: F64,
    zp: F64 | None,
    ridge: float,
    slope0: float,
    strength: float,
) -> tuple[F64, float, float]:
    """Ridge of z on centred one-hot features (+ the prior, shrunk toward ``slope0``).

    ``feats_t`` is [F, n]. One-hot features that are equal or complementary on the
    measured configs are merged first, exactly: k copies of a column under penalty
    ``ridge`` fit like one column under ``ridge / k`` whose weight is then split
    evenly, so the solution is the unmerged ridge's while the system is only as large
    as the data's real rank (unet's 578 features on 1,469 configs are 43 columns).
    """
    flip = feats_t[:, 0].copy()  # canonical sign: every merged column starts False
    canon = feats_t ^ flip[:, None]
    packed = np.packbits(canon, axis=1)
    keys = packed.view(np.dtype((np.void, packed.shape[1]))).ravel()
    _, first, group, counts = np.unique(
        keys, return_index=True, return_inverse=True, return_counts=True
    )
    group = group.ravel()
    cols = canon[first].astype(np.float64)  # [G, n]
    means = cols.mean(1)
    design = cols - means[:, None]
    penalty = ridge / counts.astype(np.float64)
    target = z
    if zp is not None:
        design = np.vstack([design, zp])
        penalty = np.append(penalty, strength)
        target = z - slope0 * zp
    beta = _ridge(design, target, penalty)
    slope = slope0 + float(beta[-1]) if zp is not None else 0.0
    share = beta[: counts.size] / counts  # each merged copy's weight
    w = np.where(flip, -1.0, 1.0) * share[group]
    # sum_g beta_g (canon_g(x) - mean_g) with canon = x xor flip, expanded:
    offset = float(
        np.sum(np.where(flip, share[group], 0.0)) - beta[: counts.size] @ means
    )
    return w, offset, slope


def _ridge(a_t: F64, y: F64, penalty: F64) -> F64:
    """argmin |y - A b|^2 + sum penalty b^2 for A = a_t.T, primal or dual (smaller)."""
    p, n = a_t.shape
    if n >= p:
        gram = a_t @ a_t.T
        gram[np.diag_indices_from(gram)] += penalty
        return np.asarray(np.linalg.solve(gram, a_t @ y), np.float64)
    scaled = a_t / penalty[:, None]  # (A'A + P)^-1 A' = P^-1 A' (A P^-1 A' + I)^-1
    kernel = a_t.T @ scaled
    kernel[np.diag_indices_from(kernel)] += 1.0
    return np.asarray(scaled @ np.linalg.solve(kernel, y), np.float64)
