"""The methods the adaptation study compares (``xla_costmodel.studies.adaptation``).

Each fits on one graph's measured (configs, runtimes, prior scores) and returns a
scorer of the other configs: ``prior`` (the artifact alone); ``log``, ``rank``,
``hybrid`` (``adapt.fit`` without the prior, with that target; ``/gcv``: ridge
strength by generalised cross-validation instead of ``adapt.RIDGE``); ``krr`` (kernel
ridge, RBF on the Hamming distance between configs, gamma and lambda by GCV);
``+prior`` (with the prior: slope shrunk toward ``adapt.PRIOR_SLOPE``; ``/feature``:
shrunk toward 0 like a one-hot weight; ``/offset``: fixed at 1). CHOSEN is
``adapt.fit`` with its defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from xla_costmodel.tpugraphs import adapt

F64 = npt.NDArray[np.float64]

# A method fits on (configs, runtimes, prior) and returns a scorer (configs, prior).
Scorer = Callable[[np.ndarray, np.ndarray], np.ndarray]
Method = Callable[[np.ndarray, np.ndarray, np.ndarray], Scorer]
PRIOR, CHOSEN = "prior", "hybrid+prior"
GRID = np.logspace(-2, 3, 21)


def _prior_only(c: np.ndarray, r: np.ndarray, p: np.ndarray) -> Scorer:
    return lambda c2, p2: p2


def _adapt(use_prior: bool, gcv: bool = False, **kw: Any) -> Method:
    def fit(c: np.ndarray, r: np.ndarray, p: np.ndarray) -> Scorer:
        ridge = _gcv_ridge(c, r, kw.get("target", "hybrid")) if gcv else adapt.RIDGE
        model = adapt.fit(c, r, p if use_prior else None, ridge=ridge, **kw)
        return lambda c2, p2: model.score(c2, p2 if use_prior else None)

    return fit


def _distinct(c: np.ndarray, r: np.ndarray, p: np.ndarray) -> tuple[F64, F64, F64]:
    flat = c.reshape(len(c), -1).astype(np.float64)
    uniq, inv = np.unique(flat, axis=0, return_inverse=True)
    inv = inv.ravel()
    k = np.bincount(inv)
    return uniq, np.bincount(inv, np.log(r)) / k, np.bincount(inv, p) / k


def _one_hot(uniq: F64, x: F64) -> F64:
    """Indicators of each value of each column varying in ``uniq``, evaluated on x."""
    parts = [
        x[:, j : j + 1] == np.unique(uniq[:, j])
        for j in np.flatnonzero(np.ptp(uniq, axis=0) > 0)
    ]
    return np.concatenate(parts, 1).astype(np.float64) if parts else x[:, :0]


def _gcv_ridge(c: np.ndarray, r: np.ndarray, target: adapt.Target) -> float:
    """Generalised cross-validation over GRID on the (unmerged) one-hot ridge."""
    uniq, y, _ = _distinct(c, r, np.zeros(len(r)))
    if len(y) < 3 or np.ptp(y) == 0:
        return adapt.RIDGE
    x = _one_hot(uniq, uniq)
    x -= x.mean(0)
    d, u = np.linalg.eigh(x @ x.T)
    return float(
        GRID[
            np.argmin(
                [_gcv(d, u, adapt.regression_target(y, target), lam) for lam in GRID]
            )
        ]
    )


def _gcv(d: F64, u: F64, z: F64, lam: float) -> float:
    shrink = np.clip(d, 0, None) / (np.clip(d, 0, None) + lam)
    resid = z - u @ (shrink * (u.T @ z))
    return float(len(z) * (resid @ resid) / max(len(z) - shrink.sum(), 1e-9) ** 2)


def _krr(use_prior: bool) -> Method:
    """Kernel ridge, RBF on the Hamming distance; (gamma, lambda) by GCV."""

    def fit(c: np.ndarray, r: np.ndarray, p: np.ndarray) -> Scorer:
        uniq, y, pm = _distinct(c, r, p)
        mu, sd = float(pm.mean()), float(pm.std()) or 1.0

        def base(p2: np.ndarray) -> np.ndarray:
            return (p2 - mu) / sd if use_prior else np.zeros(len(p2))

        if len(y) < 2 or np.ptp(y) == 0:
            return lambda c2, p2: base(p2)
        z = adapt.regression_target(y) - base(pm)
        oh = _one_hot(uniq, uniq)
        width = max(float(oh.sum(1)[0]), 1.0)  # varying columns (one value each)
        best = (np.inf, 1.0, np.zeros(len(z)))
        for gamma in (0.5, 1.0, 2.0, 4.0, 8.0):
            d, u = np.linalg.eigh(np.exp(-gamma * (1 - oh @ oh.T / width)))
            for lam in GRID * 1e-2:
                g = _gcv(d, u, z, lam)
                if g < best[0]:
                    best = (g, gamma, u @ ((u.T @ z) / (np.clip(d, 0, None) + lam)))
        _, gamma, alpha = best

        def score(c2: np.ndarray, p2: np.ndarray) -> np.ndarray:
            x = _one_hot(uniq, c2.reshape(len(c2), -1).astype(np.float64))
            kernel = np.exp(-gamma * (1 - x @ oh.T / width))
            return np.asarray(kernel @ alpha + base(p2))

        return score

    return fit


METHODS: dict[str, Method] = {
    PRIOR: _prior_only,
    "log": _adapt(False, target="log"),
    "log/gcv": _adapt(False, gcv=True, target="log"),
    "rank": _adapt(False, target="rank"),
    "hybrid": _adapt(False),
    "hybrid/gcv": _adapt(False, gcv=True),
    "krr": _krr(False),
    "log+prior": _adapt(True, target="log"),
    "rank+prior": _adapt(True, target="rank"),
    CHOSEN: _adapt(True),
    "hybrid+prior/gcv": _adapt(True, gcv=True),
    "hybrid+prior/feature": _adapt(True, prior_slope=0.0, prior_strength=adapt.RIDGE),
    "hybrid+prior/offset": _adapt(True, prior_slope=1.0, prior_strength=1e9),
    "krr+prior": _krr(True),
}
