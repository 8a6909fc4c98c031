"""The tuner's policy (portfolio first, then the ranking) and its final decision."""

from __future__ import annotations

import numpy as np
import pytest

from xla_costmodel.clients.xla import decide, policy


def test_the_first_round_measures_the_portfolio_and_the_last_exploits() -> None:
    rounds = policy.plan(8)
    assert sum(r.size for r in rounds) == 8 and len(rounds) == 3
    assert rounds[0].explore == rounds[0].size  # all from the portfolio
    assert rounds[-1].explore == 0
    assert policy.plan(1) == [policy.Round(1, 1)]
    with pytest.raises(ValueError, match="rounds"):
        policy.plan(2, rounds=3)


def test_pick_takes_the_portfolio_head_then_the_ranking() -> None:
    ranking = [5, 4, 3, 2, 1, 0]
    portfolio = [0, 2, 4, 1, 3, 5]
    assert policy.pick(ranking, portfolio, policy.Round(3, 3)) == [0, 2, 4]
    assert policy.pick(ranking, portfolio, policy.Round(3, 1)) == [0, 5, 4]
    assert policy.pick(ranking, portfolio, policy.Round(2, 1), taken=[0, 5]) == [2, 4]
    assert policy.pick(ranking, None, policy.Round(2, 2)) == [5, 4]


def _pairs(speedup: float, noise: float, seed: int, n: int = decide.REPEATS):
    rng = np.random.default_rng(seed)
    drift = 1 + noise * rng.standard_normal(n)  # shared by both members of a pair
    default = 10e6 * drift * (1 + noise * rng.standard_normal(n))
    cand = 10e6 / speedup * drift * (1 + noise * rng.standard_normal(n))
    return default, cand


def test_the_decision_keeps_the_default_when_the_candidate_is_not_faster() -> None:
    kept = 0
    for seed in range(200):
        d, c = _pairs(1.0, 0.05, seed)  # the same speed, 5 % noise
        chosen, _ = decide.decide([d], [c])
        kept += chosen is not None
    assert kept <= 200 * decide.ALPHA  # false wins no more often than alpha


def test_the_decision_keeps_a_clearly_faster_candidate() -> None:
    d, c = _pairs(1.3, 0.03, 1)
    chosen, verdicts = decide.decide([d, d], [c * 1.5, c])
    assert chosen == 1 and verdicts[1].kept and verdicts[1].speedup > 1.2
    assert verdicts[1].p_value < decide.ALPHA


def test_a_significant_but_tiny_win_is_not_kept() -> None:
    d = np.full(7, 100.0) + np.arange(7) * 0.01
    c = d / 1.01  # 1 % faster in every pair: significant, under the minimum gain
    verdict = decide.compare(d, c)
    assert verdict.p_value < decide.ALPHA and not verdict.kept


def test_per_round_normalisation_ignores_a_round_the_whole_machine_ran_slow() -> None:
    from xla_costmodel.clients.xla.measure import normalised_medians

    table = np.array([[10, 10, 30, 10], [20, 20, 60, 20], [5, 5, 15, 5]], np.int64)
    # Round 2 ran 3x slower for everyone; raw medians are still right here, but one
    # more slow round would shift them. Normalised, it does not count at all.
    assert normalised_medians(table).tolist() == [10, 20, 5]
    slow = np.hstack([table, table[:, 2:3], table[:, 2:3]])  # half the rounds slow
    assert np.median(slow, axis=1).tolist() == [20.0, 40.0, 10.0]  # raw: shifted
    ratios = normalised_medians(slow) / normalised_medians(slow)[0]
    assert ratios.tolist() == [1.0, 2.0, 0.5]  # normalised: relative speeds exact
