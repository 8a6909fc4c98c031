"""Runtime labels from timing tables: what a config's measured runtime is, for the
collector's and the tuner's measurements (``clients/xla/measure.py``) and the
training labels rebuilt from stored rounds (``models/xla_cpu_recipe.py``).

    normalised_medians(round_min_ns [E, R]) -> ns [E]
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def normalised_medians(round_min_ns: npt.ArrayLike) -> I64:
    """Each executable's median over rounds of its time relative to the round's median
    executable, scaled back to ns by the median round: a round the whole machine ran
    slow in (a neighbour's load, a frequency drop) counts like any other. On the
    collected data it raised split-half agreement (Spearman of the medians of two
    halves of the rounds) on every target: 0.750 -> 0.787 (cpu-amd-25.1-avx2, the
    noisiest), 0.915 -> 0.917, 0.779 -> 0.780, 0.766 -> 0.771."""
    table = np.asarray(round_min_ns, np.float64)
    speed = np.median(table, axis=0, keepdims=True)  # [1, R]
    scale = float(np.median(speed))
    return np.asarray((np.median(table / speed, axis=1) * scale).round(), np.int64)
