"""The noise of one interleaved pair, fitted to the collected controls.

The fleet simulation's final decision draws as many pairs as the sequential test
asks for (up to ``decide.MAX_PAIRS``), more than the at most ~9 rounds a collected
config has; drawing those rounds again would make the test look more certain than
it is (the truth is their median). So a pair's log ratio ``log(default /
candidate)`` is drawn as the true log ratio plus noise:

    log_ratio = log(truth_default / truth_candidate) + scale[program] * z

fitted to the controls of the collected data: configs that compiled to the *same*
optimized HLO (the collector's hashes) are the same executable, so their log
ratio within one round is pure noise, of the very kind one pair of the tuner sees
(two executables, one round, shared drift). ``scale`` is each program's robust
scale of those ratios (1.4826 MAD; the target's median where a program has fewer
than ``MIN_RESIDUALS``); ``z`` is drawn from the target's pooled ratios divided by
their program's scale, which keeps the heavy tails (the 1 % quantiles sit near 8
robust standard deviations on the AVX2 target). A collected round is one minimum
of 2 runs amid 60 configs, a tuner's pair the minimum of 3 runs side by side: the
model errs on the noisy side.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

MIN_RESIDUALS = 20
F64 = npt.NDArray[np.float64]


def residuals(round_min: npt.ArrayLike, hashes: Sequence[str]) -> F64:
    """Same-round log ratios of consecutive configs with the same optimized HLO."""
    logs = np.log(np.asarray(round_min, np.float64))
    groups: dict[str, list[int]] = {}
    for i, h in enumerate(hashes):
        groups.setdefault(h, []).append(i)
    out = [logs[a] - logs[b] for g in groups.values() for a, b in itertools.pairwise(g)]
    return np.concatenate(out) if out else np.zeros(0)


def sidecar_residuals(npz: Path) -> F64:
    """``residuals`` of the program whose sidecar sits beside ``npz`` (its rows)."""
    side = json.loads(npz.with_suffix(".json").read_text())
    rounds, hashes = side.get("round_min_ns"), side.get("optimized_hlo_sha1")
    if rounds is None or hashes is None:
        return np.zeros(0)
    rows = side.get("rows", range(len(rounds)))
    if len(rows) != len(rounds) or max(rows, default=0) >= len(hashes):
        return np.zeros(0)
    return residuals(rounds, [hashes[r] for r in rows])


def robust_scale(x: F64) -> float:
    return float(1.4826 * np.median(np.abs(x - np.median(x))))


@dataclass(frozen=True)
class PairNoise:
    """One target's pair noise: ``scales`` per program name, the pooled ``z``."""

    scales: dict[str, float]
    z: F64

    @classmethod
    def fit(cls, per_program: dict[str, F64]) -> PairNoise:
        own = {
            n: robust_scale(r)
            for n, r in per_program.items()
            if r.size >= MIN_RESIDUALS and robust_scale(r) > 0
        }
        if not own:  # no controls at all: a 2.4 % pair noise, normal
            z = np.random.default_rng(0).standard_normal(1000)
            return cls(dict.fromkeys(per_program, 0.024), z)
        typical = float(np.median(list(own.values())))
        scales = {n: own.get(n, typical) for n in per_program}
        z = np.concatenate(
            [(r - np.median(r)) / own[n] for n, r in per_program.items() if n in own]
        )
        return cls(scales, np.concatenate([z, -z]))  # a pair's order is random

    def draw(
        self, program: str, true_log_ratio: float, rng: np.random.Generator
    ) -> float:
        """One pair's log ratio ``log(default / candidate)``."""
        z = float(self.z[rng.integers(self.z.size)])
        return true_log_ratio + self.scales[program] * z

    def summary(self) -> dict[str, float]:
        s = np.asarray(list(self.scales.values()))
        return {
            "scale_median": float(np.median(s)),
            "scale_min": float(s.min()),
            "scale_max": float(s.max()),
            "z_q01": float(np.quantile(self.z, 0.01)),
        }
