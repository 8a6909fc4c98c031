"""The tuner's policy (portfolio first, then the ranking) and its final decision."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from xla_costmodel.clients.xla import decide, policy
from xla_costmodel.tpugraphs import paired, xla_cpu, xla_cpu2


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
    from xla_costmodel.tpugraphs.labels import normalised_medians

    table = np.array([[10, 10, 30, 10], [20, 20, 60, 20], [5, 5, 15, 5]], np.int64)
    # Round 2 ran 3x slower for everyone; raw medians are still right here, but one
    # more slow round would shift them. Normalised, it does not count at all.
    assert normalised_medians(table).tolist() == [10, 20, 5]
    slow = np.hstack([table, table[:, 2:3], table[:, 2:3]])  # half the rounds slow
    assert np.median(slow, axis=1).tolist() == [20.0, 40.0, 10.0]  # raw: shifted
    ratios = normalised_medians(slow) / normalised_medians(slow)[0]
    assert ratios.tolist() == [1.0, 2.0, 0.5]  # normalised: relative speeds exact


def _log_normal_pairs(speedup: float, noise: float, seed: int):  # type: ignore[no-untyped-def]
    """``draw_pair`` for ``decide.sequential``: shared drift, ``noise`` on each."""
    rng = np.random.default_rng(seed)

    def draw() -> tuple[float, float]:
        drift = 1 + noise * rng.standard_normal()
        default = 10e6 * drift * (1 + noise * rng.standard_normal())
        return default, 10e6 / speedup * drift * (1 + noise * rng.standard_normal())

    return draw


def test_the_sequential_decision_keeps_the_default_when_not_faster() -> None:
    for speedup in (1.0, 0.97):
        verdicts = [
            decide.sequential(_log_normal_pairs(speedup, 0.02, seed))
            for seed in range(300)
        ]
        false_wins = sum(v.kept for v in verdicts)
        assert false_wins <= 0.05 * len(verdicts)
        assert all(decide.MIN_PAIRS <= v.pairs <= decide.MAX_PAIRS for v in verdicts)


def test_the_sequential_decision_confirms_a_3pct_gain_under_2pct_noise() -> None:
    verdicts = [
        decide.sequential(_log_normal_pairs(1.03, 0.02, seed)) for seed in range(200)
    ]
    confirmed = [v for v in verdicts if v.kept]
    assert len(confirmed) >= 0.9 * len(verdicts)
    assert all(v.pairs <= decide.MAX_PAIRS for v in verdicts)
    assert all(v.speedup_low <= v.speedup <= v.speedup_high for v in verdicts)


def test_a_clear_win_stops_at_the_first_look_and_a_clear_loss_early() -> None:
    win = decide.sequential(_log_normal_pairs(1.5, 0.01, 0))
    assert win.kept and win.pairs == decide.MIN_PAIRS and win.speedup_low > 1.3
    loss = decide.sequential(_log_normal_pairs(0.7, 0.01, 0))
    assert not loss.kept and loss.pairs == decide.MIN_PAIRS


def test_sequential_add_reports_undecided_then_the_verdict() -> None:
    test = decide.Sequential(min_pairs=3, max_pairs=5)
    for candidate in (97.0, 101.0, 96.0, 99.0):  # 3 % faster at best: undecided
        assert test.add(100.0, candidate) is None and not test.done
    verdict = test.add(100.0, 98.0)  # the cap: the default stays
    assert test.done and verdict is not None and not verdict.kept
    assert verdict.pairs == 5 and test.final() == verdict


def test_a_stored_decision_on_trial_holds_unless_shown_slower() -> None:
    def trial(speedup: float, seed: int) -> decide.Verdict:
        return decide.sequential(
            _log_normal_pairs(speedup, 0.03, seed),
            min_gain=decide.REUSE_MIN_GAIN,
            hold=True,
        )

    assert sum(trial(1.02, s).kept for s in range(100)) >= 90
    assert sum(trial(0.95, s).kept for s in range(100)) <= 5


def test_the_signed_rank_p_and_the_median_interval() -> None:
    from scipy.stats import wilcoxon

    x = np.random.default_rng(3).standard_normal(15) + 0.4
    expected = wilcoxon(x, alternative="greater", method="exact").pvalue
    assert paired.signed_rank_p(x) == pytest.approx(expected)
    assert paired.median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)  # too few: min/max
    low, high = paired.median_interval(np.arange(1.0, 21.0))
    assert (low, high) == (6.0, 15.0)  # binomial order statistics, n = 20
    at = decide.looks()
    assert at[0] == decide.MIN_PAIRS and at[-1] == decide.MAX_PAIRS
    assert sum(decide.spend(at)) == pytest.approx(decide.ALPHA)


def test_finalists_are_the_fastest_under_the_ratio() -> None:
    vs = {3: 0.9, 5: 1.1, 7: 0.95, 9: 0.8}
    assert policy.finalists(vs, 2) == [9, 3]
    assert policy.finalists({5: 1.1}, 2) == []


def test_a_finalist_holds_only_if_faster_on_every_cpu_and_not_slower_on_one() -> None:
    from xla_costmodel.clients.xla.confirm import Confirmation, holds, not_slower

    fast = tuple((1_300_000 + i, 1_000_000) for i in range(7))  # 1.3x, p = 1/128
    slow_one = tuple((1_000_000, 1_300_000 + i) for i in range(7))  # 0.77x
    level = tuple((1_000_000, 1_000_000 + i) for i in range(7))
    assert holds(Confirmation(pairs=fast, one_cpu=fast), 0.02)
    assert holds(Confirmation(pairs=fast), 0.02)  # a 1-CPU process: no second look
    # The U-Net of issue 34: 1.2x with both cores free, 0.75x on one: out.
    assert not holds(Confirmation(pairs=fast, one_cpu=slow_one), 0.02)
    assert not holds(Confirmation(pairs=fast[:6], one_cpu=fast), 0.02)  # too few
    assert not holds(Confirmation(pairs=fast, one_cpu=fast), 0.5)  # under min_gain
    assert not holds(Confirmation(error="killed by signal 11"), 0.02)
    # A fleet's decision on trial holds unless every round shows it slower.
    assert not_slower(Confirmation(pairs=level))
    assert not not_slower(Confirmation(pairs=slow_one))
    assert not not_slower(Confirmation(error="did not compile"))


def test_a_decision_sends_the_pairs_never_claimed_figures() -> None:
    from xla_costmodel.clients.wire import Refuted
    from xla_costmodel.clients.xla.reuse import Program, decision

    program = Program("g" * 64, "f" * 64)
    row = xla_cpu2.sample(8, 0)[3]
    pairs = ((1_300_000, 1_000_000), (1_250_000, 1_000_000))
    common: dict[str, Any] = {
        "target": "t",
        "compiler": "c",
        "budget": 8,
        "strategy": "model",
    }
    kept = decision(program, row, pairs, **common)
    assert kept.paired_runtimes_ns == pairs and not kept.kept_default
    assert kept.config == tuple(float(v) for v in row)
    body = kept.to_json("xla_cpu", None)
    assert body["paired_runtimes_ns"] == [list(p) for p in pairs]
    assert not {"speedup", "speedup_low", "p_value", "pairs"} & set(body)
    assert "compiler_options" not in body  # the service derives them from the row
    refuted = Refuted(config=kept.config, reason="slower", paired_runtimes_ns=pairs)
    default = decision(program, xla_cpu2.default_row(), (), refuted=refuted, **common)
    assert default.kept_default and "paired_runtimes_ns" not in default.to_json(
        "m", None
    )
    assert default.to_json("m", None)["refuted"]["reason"] == "slower"


def test_a_crash_journal_names_an_xla_cpu_2_row_as_its_xla_cpu_1_row_was() -> None:
    """``config_key``: journals written before the loop threshold existed still
    name the configs that crashed; every sampled row keeps a name of its own."""
    from xla_costmodel.clients.xla.tune_config import config_key

    older = xla_cpu.sample(64, 0)
    assert [config_key(xla_cpu2.upgrade_v1(r)) for r in older] == [
        config_key(r) for r in older
    ]
    rows = xla_cpu2.sample(256, 0)
    assert len({config_key(r) for r in rows}) == len(rows)


def test_short_spells_each_extra_option_of_the_map() -> None:
    from xla_costmodel.clients.xla.programs import short

    row = xla_cpu2.sample(8, 0)[1]  # the default with the loop threshold at 65536
    assert short(xla_cpu2.to_options(row).flat()) == (
        "small_while_loop_byte_threshold=65536"
    )
    assert "not,spelled" in short({xla_cpu2.EXTRA_KEY: "not,spelled"})
