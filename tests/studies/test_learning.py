"""``python -m xla_costmodel.studies.learning --quick --json`` end to end: real training and export,
real redis-server, PostgreSQL and uvicorn services, the real client and replay.

Checks the JSON's documented keys and that its values are sane (slowdowns >= 0, taus
in [-1, 1], timings > 0), that the JSON and the plot are written, and that no process
the run started outlives it. No timing thresholds: figures depend on the machine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from xla_costmodel.harness import child_processes

STRATEGIES = ("slowdown", "model_slowdown", "random_slowdown", "per_graph_slowdown")
METADATA = (
    "date",
    "cpu_model",
    "cpu_flags",
    "cores",
    "python",
    "onnxruntime",
    "numpy",
    "git_commit",
)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """The real command line (typer), run in this process so that every server it
    starts is a child of ours, and checked gone afterwards."""
    import typer
    from typer.testing import CliRunner

    from xla_costmodel.studies.learning import learning

    out = tmp_path_factory.mktemp("learning")
    app = typer.Typer()
    app.command()(learning)
    before = child_processes()
    result = CliRunner().invoke(app, ["--quick", "--json", "--out", str(out)])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    assert child_processes() <= before
    return json.loads(result.stdout), out


def slowdown(value: Any) -> None:
    assert isinstance(value, float | int) and value >= 0, value


def tau(value: Any) -> None:
    assert isinstance(value, float) and -1.0 <= value <= 1.0, value


def timing(span: dict[str, Any]) -> None:
    assert span["p50_ms"] > 0 and span["p90_ms"] >= span["p50_ms"] and span["n"] > 0


@pytest.mark.slow
def test_files_and_metadata(quick_run: tuple[dict[str, Any], Path]) -> None:
    result, out = quick_run
    assert result["mode"] == "quick" and result["wall_s"] > 0
    assert json.loads((out / "learning_curve_quick.json").read_text()) == result
    assert Path(result["plot"]) == out / "learning_curve_quick.png"
    assert Path(result["plot"]).stat().st_size > 0
    meta = result["metadata"]
    assert all(meta[key] for key in METADATA if key != "cpu_flags")
    assert isinstance(meta["cpu_flags"], list) and meta["cores"] == os.cpu_count()
    assert set(result["definitions"]) >= {"slowdown", "noise_ceiling", "timings"}


@pytest.mark.slow
def test_tile_leave_one_kernel_out(quick_run: tuple[dict[str, Any], Path]) -> None:
    tile = quick_run[0]["tile"]
    kernels = tile["kernels"]
    assert (
        len(kernels) == tile["protocol"]["kernels"] == quick_run[0]["plan"]["kernels"]
    )
    assert len({k["model"] for k in kernels}) == len(kernels)
    for kernel in kernels:
        slowdown(kernel["default_slowdown"])
        assert kernel["feedback_stored"] > 0
        for row in kernel["rounds"]:
            for key in STRATEGIES:
                slowdown(row[key])
    assert [r["measured"] for r in tile["rounds"]] == [2, 4, 6]
    for row in tile["rounds"] + tile["long_curve"]["means"]:
        for key in (*STRATEGIES, "default_slowdown"):
            slowdown(row[key])
    goal = tile["goal"]
    assert goal["evaluated"] and goal["measured"] == 6
    assert goal["met"] == (goal["at_most_default"] and goal["below_random"])
    # fusion.191 (579 configs) is among the quick run's held-out kernels
    assert [k["configs"] >= 20 for k in tile["long_curve"]["kernels"]] == [True]


@pytest.mark.slow
def test_unet_headline_and_curve(quick_run: tuple[dict[str, Any], Path]) -> None:
    layout = quick_run[0]["layout"]
    head = layout["headline"]
    assert head["graph"] == "unet_3d.4x4.bf16"
    for seed in head["seeds"]:
        tau(seed["tau_adapted"])
        tau(seed["tau_prior"])
        assert seed["feedback_stored"] == seed["feedback_rows"] == 50
        assert 0 < seed["adapted_distinct_configs"] <= 50
    stats = head["seeds_1_to_n"]["tau_adapted"]
    assert stats["min"] <= stats["mean"] <= stats["max"]
    tau(head["noise_ceiling"]["tau"])
    assert head["noise_ceiling"]["repeated_configs"] > 0
    rounds = layout["curve"]["per_round"]
    assert [r["measured"] for r in rounds] == [5 * (i + 1) for i in range(len(rounds))]
    for row in rounds:
        for key in STRATEGIES:
            slowdown(row[key])
        for value in row["kendall_tau_unmeasured"].values():
            if value is not None:
                tau(value)


@pytest.mark.slow
def test_timings(quick_run: tuple[dict[str, Any], Path]) -> None:
    t = quick_run[0]["timings"]
    assert t["fit"]["measurements"] == 2000 and t["fit"]["configurable_nodes"] == 62
    timing(t["fit"]["default_blas_threads"])
    timing(t["fit"]["one_blas_thread"])
    rank = t["rank"]
    assert rank["configs"] == 1000 and rank["measurements"] == 2000
    assert rank["feedback_stored"] == 2000 and rank["first_request_refit_ms"] > 0
    timing(rank["adapted"])
    timing(rank["prior"])
    assert rank["ratio_p50"] > 0 and rank["fits_during_timed_requests"] == 0
    assert t["feedback"]["rows_per_request"] == 64
    timing(t["feedback"]["sqlite"])
    timing(t["feedback"]["postgresql"])


def test_postgres_server_starts_a_throwaway_cluster_and_removes_it(
    tmp_path: Path,
) -> None:
    import psycopg

    from xla_costmodel.harness import PostgresServer

    with PostgresServer(tmp_path) as pg:
        assert pg.port != 5432 and pg.root is not None
        root = pg.root
        with psycopg.connect(pg.url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    assert not pg.running and not root.exists()
    pg.stop()  # safe twice
