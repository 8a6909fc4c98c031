"""``costmodel simulate``: the fleet simulation runs the service's own code path and
prints the issue's object."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from xla_costmodel.studies import fleet
from xla_costmodel.tpugraphs.knowledge import Knowledge


def test_simulate_quick_json_prints_the_object() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from xla_costmodel.cli import main; main()",
            "simulate",
            "--quick",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result = json.loads(out.stdout)
    assert set(result) >= {"targets", "goals"}
    assert len(result["targets"]) >= 2
    for target in result["targets"].values():
        assert target["programs"] >= 2 and target["families"] >= 1
        rows = target["by_history"]
        assert [r["history"] for r in rows] == sorted(r["history"] for r in rows)
        for r in rows:
            assert r["K"] == 8
            assert {"model", "random", "fixed", "oracle", "regressions"} <= set(r)
            assert r["oracle"] >= max(r["model"], r["random"]) > 0
            assert 0.0 <= r["regressions"] <= 1.0


def test_the_simulated_tuner_measures_at_most_its_budget() -> None:
    programs = fleet.load_target(fleet.DATA / "cpu-amd-25.1-avx2")[:3]
    p = programs[0]
    rng = np.random.default_rng(0)
    kept, stored = fleet.tune_model(p, Knowledge.fit([], p.configs[0]), None, rng)
    assert stored is not None
    assert len(stored.rel) <= fleet.K + 1  # K configs and the default
    assert 0 <= kept < len(p.configs)
