"""Metrics against hand-computed values and brute force (ties, K > C, exact baselines)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from xla_costmodel.tpugraphs.metrics import (
    LAYOUT_METRICS,
    TILE_METRICS,
    expected_random_topk_slowdown,
    kendall_tau,
    mean_metrics,
    topk_slowdown,
)


def brute_tau_b(x: np.ndarray, y: np.ndarray) -> float:
    n = len(x)
    s = tx = ty = 0
    for i, j in itertools.combinations(range(n), 2):
        dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        s += dx * dy
        tx += dx != 0
        ty += dy != 0
    return float(s / math.sqrt(tx * ty))


def test_topk_slowdown_by_hand() -> None:
    runtimes = [10.0, 20.0, 40.0, 15.0]
    scores = [3.0, 0.0, 1.0, 2.0]  # model order: 20, 40, 15, 10
    assert topk_slowdown(scores, runtimes, 1) == pytest.approx(1.0)
    assert topk_slowdown(scores, runtimes, 3) == pytest.approx(0.5)
    assert topk_slowdown(scores, runtimes, 4) == 0.0
    assert topk_slowdown(scores, runtimes, 10) == 0.0  # K > C: every config


def test_tied_scores_are_broken_by_config_index() -> None:
    assert topk_slowdown([0.0, 0.0], [30.0, 10.0], 1) == pytest.approx(2.0)
    assert TILE_METRICS([1.0, 1.0, 1.0], [3.0, 2.0, 1.0])[
        "top1_slowdown"
    ] == pytest.approx(2.0)


def test_kendall_tau_by_hand_and_with_ties() -> None:
    assert kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    assert kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # tau-b with ties: S = 2, n0 = 6, x ties 1, y ties 1 -> 2 / sqrt(5 * 5)
    assert kendall_tau([1, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(
        brute_tau_b(np.array([1, 1, 2, 3]), np.array([1, 2, 2, 3]))
    )
    assert math.isnan(kendall_tau([1, 2, 3], [5, 5, 5]))
    assert kendall_tau([7, 7, 7], [1, 2, 3]) == 0.0


@pytest.mark.parametrize("seed", range(5))
def test_kendall_tau_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    x = rng.integers(0, 6, n).astype(float)  # many ties
    y = rng.integers(0, 8, n).astype(float)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return
    assert kendall_tau(x, y) == pytest.approx(brute_tau_b(x, y))


def test_expected_random_slowdown_equals_enumeration() -> None:
    runtimes = np.array([5.0, 3.0, 3.0, 9.0, 4.0])
    for k in (1, 2, 3, 5, 7):
        kk = min(k, 5)
        mins = [min(c) for c in itertools.combinations(runtimes, kk)]
        want = np.mean(mins) / 3.0 - 1.0
        assert expected_random_topk_slowdown(runtimes, k) == pytest.approx(want)


def test_random_baseline_has_every_key_and_zero_tau() -> None:
    assert set(TILE_METRICS.random_baseline([1.0, 2.0])) == set(
        TILE_METRICS([0, 1], [1.0, 2.0])
    )
    layout = LAYOUT_METRICS.random_baseline([1.0, 2.0, 3.0])
    assert layout["kendall_tau"] == 0.0
    assert set(layout) == set(LAYOUT_METRICS([0, 1, 2], [1.0, 2.0, 3.0]))


def test_default_baseline_is_the_normaliser_over_the_best() -> None:
    got = TILE_METRICS.default_baseline([0.8, 1.0, 2.0], 1.0)
    assert got == {
        "top1_slowdown": pytest.approx(0.25),
        "top5_slowdown": pytest.approx(0.25),
        "top10_slowdown": pytest.approx(0.25),
    }


def test_mean_skips_undefined_values() -> None:
    rows = [{"kendall_tau": 0.5}, {"kendall_tau": math.nan}, {"kendall_tau": 0.1}]
    assert mean_metrics(rows, ["kendall_tau"]) == {"kendall_tau": pytest.approx(0.3)}
    assert mean_metrics([{"kendall_tau": math.nan}], ["kendall_tau"]) == {
        "kendall_tau": None
    }


def test_kendall_tau_is_fast_on_large_inputs() -> None:
    rng = np.random.default_rng(0)
    x = rng.random(50_000)
    assert kendall_tau(x, x + 0.01 * rng.random(50_000)) > 0.9


@pytest.mark.parametrize("seed", range(3))
def test_expected_random_slowdown_with_many_ties(seed: int) -> None:
    # Small integer runtimes: ties everywhere, every K from 1 to C.
    runtimes = np.random.default_rng(seed).integers(1, 6, size=9)
    for k in range(1, 10):
        brute = np.mean([min(s) for s in itertools.combinations(runtimes, k)])
        got = expected_random_topk_slowdown(runtimes, k)
        assert got == pytest.approx(brute / runtimes.min() - 1, rel=1e-12, abs=1e-12)


def test_expected_random_slowdown_closed_form_on_large_inputs() -> None:
    # E[min of K draws from 1..N] = (N+1)/(K+1): checks the big combinatorics.
    r = np.arange(1, 2001)[::-1]
    assert expected_random_topk_slowdown(r, 199) == pytest.approx(2001 / 200 - 1)
    assert expected_random_topk_slowdown(r, 1) == pytest.approx(r.mean() - 1)
    assert expected_random_topk_slowdown(r, 2000) == 0
