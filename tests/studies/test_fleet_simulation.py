"""``costmodel simulate``: the fleet simulation runs the service's own code path and
prints the issue's object: one row per (history, budget), the budget random needs
to match the model, the second fleet's reuse."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from xla_costmodel.clients.xla import policy
from xla_costmodel.studies import fleet, fleet_report
from xla_costmodel.studies.fleet_noise import PairNoise, residuals
from xla_costmodel.studies.fleet_tuner import noise_of
from xla_costmodel.tpugraphs import xla_cpu
from xla_costmodel.tpugraphs.knowledge import Knowledge


def test_simulate_quick_budgets_json_prints_the_object() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from xla_costmodel.cli import main; main()",
            "simulate",
            "--quick",
            "--budgets",
            "1,4",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result = json.loads(out.stdout)
    assert set(result) >= {"targets", "goals", "budgets"}
    assert result["budgets"] == [1, 4]
    assert len(result["targets"]) >= 2
    for target in result["targets"].values():
        assert target["programs"] >= 2 and target["families"] >= 1
        rows = target["by_history"]
        keys = [(r["history"], r["K"]) for r in rows]
        assert keys == sorted(keys)
        for h in {r["history"] for r in rows}:
            assert [r["K"] for r in rows if r["history"] == h] == [1, 4]
        for r in rows:
            assert {"model", "random", "fixed", "oracle", "regressions"} <= set(r)
            assert r["oracle"] >= max(r["model"], r["random"]) > 0
            assert 0.0 <= r["regressions"] <= 1.0
            assert r["compiles"] <= r["K"] and r["pairs"] >= 0
        assert [c["K"] for c in target["random_curve"]][-1] == 64
        for m in target["random_to_match"]:
            assert m["model_K"] in (1, 4) or m["model_K"] == 2
            assert m["random_K"] is None or 1 <= m["random_K"] <= 64
        reuse = target["reuse"]
        assert reuse["second"] > 0 and reuse["compiles_per_program"] >= 0


def test_the_simulated_tuner_measures_at_most_its_budget() -> None:
    programs = fleet.load_target(fleet.DATA / "cpu-amd-25.1-avx2")[:3]
    p = programs[0]
    rng = np.random.default_rng(0)
    noise = noise_of(programs)
    for budget in (1, 2, 5):
        out, stored = fleet.tune_model(
            p, Knowledge.fit([], p.configs[0]), None, rng, noise, budget
        )
        assert stored is not None
        assert len(stored.rel) <= budget + 1  # K configs and the default
        assert 0 <= out.kept < len(p.configs) and out.compiles <= budget
        assert out.pairs <= policy.confirm(budget) * 40


def test_the_pair_noise_is_fitted_to_same_executable_rounds() -> None:
    rounds = np.array([[100, 110, 90], [102, 108, 91], [200, 190, 210]])
    r = residuals(rounds, ["a", "a", "b"])  # rows 0 and 1: one executable
    assert np.allclose(r, np.log([100 / 102, 110 / 108, 90 / 91]))
    rng = np.random.default_rng(0)
    noise = PairNoise.fit({"p": rng.normal(0, 0.05, 400), "q": np.zeros(0)})
    assert 0.04 < noise.scales["p"] < 0.06
    assert noise.scales["q"] == noise.scales["p"]  # too few: the target's
    draws = [noise.draw("p", 0.1, rng) for _ in range(2000)]
    assert abs(np.median(draws) - 0.1) < 0.01


def test_the_budget_random_needs_is_interpolated_in_log_budget() -> None:
    curve = [(1, 1.0), (2, 1.02), (4, 1.04), (8, 1.06)]
    assert fleet_report.random_budget_to_match(curve, 1.03) == np.sqrt(8)
    assert fleet_report.random_budget_to_match(curve, 0.99) == 1.0
    assert fleet_report.random_budget_to_match(curve, 1.07) is None


def test_the_older_space_replays_only_the_rows_it_can_express() -> None:
    """``simulate --spec xla_cpu/1``: the same data, each program keeping the rows
    ``xla_cpu/1`` can express (the loop threshold at its default): the no-regression
    check of ``xla_cpu/2``."""
    folder = fleet.DATA / "cpu-intel-6.207-avx512"
    v2 = {p.name: p for p in fleet.load_target(folder)}
    v1 = {p.name: p for p in fleet.load_target(folder, "xla_cpu/1")}
    assert v2.keys() == v1.keys()
    level = xla_cpu.WIDTH  # the first threshold column: XLA's default level
    looped = [n for n, p in v2.items() if (p.configs[:, level] == 0).any()]
    assert len(looped) >= 8  # the loops family, collected in xla_cpu/2
    for name, p in v2.items():
        older = v1[name]
        assert (older.configs[:, level] == 1).all()
        np.testing.assert_array_equal(p.configs[older.rows], older.configs)
        np.testing.assert_array_equal(p.runtimes[older.rows], older.runtimes)
        best_v1 = older.runtimes[0] / older.runtimes.min()
        assert p.oracle_v1 == best_v1 <= p.runtimes[0] / p.runtimes.min()
        if name in looped:
            assert len(older.configs) < len(p.configs)
    with pytest.raises(ValueError, match="unknown spec"):
        fleet.load_target(folder, "xla_cpu/9")
