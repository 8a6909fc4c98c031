"""``costmodel replay`` end to end: real labelled files, shipped models, real uvicorn."""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import fmean
from typing import Any

import httpx
import pytest
import typer
from clientfakes import unused_url
from typer.testing import CliRunner

from xla_costmodel.clients import CostModelClient
from xla_costmodel.clients.cli import replay
from xla_costmodel.tpugraphs.reader import load_npz

BUDGET_FRACTION = 0.1
# Its own target: other tests feed measurements of these graphs to the same server,
# and the second run below must learn from this module's first run alone.
TARGET = ["--target", "replay-e2e"]


def run_cli(*args: str) -> Any:
    app = typer.Typer()
    app.command()(replay)
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def data_args(tile_paths: list[Path], layout_path: Path) -> list[str]:
    return ["--data", str(tile_paths[0].parent), "--data", str(layout_path)]


@pytest.fixture(scope="module")
def report(live_server: str, data_args: list[str]) -> dict[str, Any]:
    result = run_cli(
        "--server",
        live_server,
        *data_args,
        *TARGET,
        "--budget-fraction",
        str(BUDGET_FRACTION),
        "--json",
    )
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def by_name(report: dict[str, Any], prefix: str) -> dict[str, Any]:
    return next(g for g in report["graphs"] if Path(g["file"]).name.startswith(prefix))


def test_report_covers_every_file(
    report: dict[str, Any], tile_paths: list[Path]
) -> None:
    assert len(report["graphs"]) == len(tile_paths) + 1 and report["skipped"] == []
    assert {g["model"] for g in report["graphs"]} == {"tile", "layout"}
    assert set(report["mean"]) >= {
        "slowdown",
        "speedup_vs_default",
        "random_slowdown",
        "measured_fraction",
    }
    for g in report["graphs"]:
        assert g["slowdown"] >= 0 and g["random_slowdown"] >= 0
        assert 1 <= g["budget"] == math.ceil(BUDGET_FRACTION * g["configs"])


def test_one_tile_graph_by_hand(
    live_server: str, report: dict[str, Any], tile_path: Path
) -> None:
    """fusion.191 (579 configs): redo the autotuner's arithmetic independently.
    The replay ranked before any feedback, by the prior alone: ``adapt=False``."""
    sample = load_npz(tile_path)
    with CostModelClient(live_server) as client:
        ranking = client.rank("tile", tile_path, sample.configs, adapt=False).ranking
    k = 58  # ceil(0.1 * 579)
    measured = list(ranking[:k])
    runtimes = sample.runtimes.tolist()
    best = min(runtimes[i] for i in measured)
    true_best = min(runtimes)
    default = runtimes[0]  # config 0 is the one whose runtime is the normaliser
    assert default == sample.normalizers[0]  # type: ignore[index]
    # E[best of a random k-subset] by its definition, summing over which config is best
    order = sorted(runtimes)
    n = len(order)
    expected_random = sum(
        order[i] * math.comb(n - 1 - i, k - 1) for i in range(n - k + 1)
    ) / math.comb(n, k)
    g = by_name(report, "fusion.191_")
    assert g["measured"] == measured and g["budget"] == k
    assert (g["best_found_ns"], g["true_best_ns"], g["default_ns"]) == (
        best,
        true_best,
        default,
    )
    assert g["slowdown"] == pytest.approx(best / true_best - 1)
    assert g["speedup_vs_default"] == pytest.approx(default / best)
    assert g["random_slowdown"] == pytest.approx(expected_random / true_best - 1)
    assert g["measured_fraction"] == pytest.approx(k / 579)


def test_random_baseline_by_hand_for_k_1(
    report: dict[str, Any], tile_paths: list[Path]
) -> None:
    """copy.24 has 10 configs, so K = 1 and a random pick's expected best is the mean."""
    path = next(p for p in tile_paths if p.name.startswith("copy.24_"))
    runtimes = load_npz(path).runtimes
    g = by_name(report, "copy.24_")
    assert g["budget"] == 1
    assert g["random_expected_best_ns"] == pytest.approx(runtimes.mean())
    assert g["best_found_ns"] == runtimes[g["measured"][0]]


def test_layout_has_no_default_and_the_means_add_up(
    report: dict[str, Any], layout_path: Path
) -> None:
    g = by_name(report, "unet_3d")
    assert g["speedup_vs_default"] is None and g["default_ns"] is None
    assert "layout" in report["definitions"]["speedup_vs_default"]
    assert g["budget"] == 197 and g["true_best_ns"] == int(
        load_npz(layout_path).runtimes.min()
    )
    graphs = report["graphs"]
    mean = report["mean"]
    assert mean["slowdown"] == pytest.approx(fmean(x["slowdown"] for x in graphs))
    assert mean["random_slowdown"] == pytest.approx(
        fmean(x["random_slowdown"] for x in graphs)
    )
    tile_speedups = [
        x["speedup_vs_default"] for x in graphs if x["collection"] == "tile"
    ]
    assert mean["speedup_vs_default"] == pytest.approx(fmean(tile_speedups))
    fractions = [x["budget"] / x["configs"] for x in graphs]
    assert mean["measured_fraction"] == pytest.approx(fmean(fractions))


def test_feedback_outcome_matches_the_service(
    live_server: str, report: dict[str, Any]
) -> None:
    has_route = (
        "/v1/feedback" in httpx.get(f"{live_server}/openapi.json").json()["paths"]
    )
    assert report["feedback"]["supported"] is has_route
    if has_route:
        assert [g["feedback_stored"] for g in report["graphs"]] == [
            g["budget"] for g in report["graphs"]
        ]


def test_second_run_uses_the_cache_and_learns_from_the_first(
    live_server: str, report: dict[str, Any], data_args: list[str]
) -> None:
    result = run_cli(
        "--server",
        live_server,
        *data_args,
        *TARGET,
        "--budget-fraction",
        str(BUDGET_FRACTION),
        "--json",
    )
    again = json.loads(result.stdout)
    # A new client sends each graph inline once; the service finds every embedding
    # cached and encodes nothing.
    assert all(g["uploaded"] for g in again["graphs"])
    assert {g["cache"] for g in again["graphs"]} <= {"memory", "redis"}
    # The first run ranked by the prior alone (an empty database) and fed back its
    # measurements; the second ranks every graph with enough of them adapted.
    assert {g["adapted"] for g in report["graphs"]} == {0}
    for first, second in zip(report["graphs"], again["graphs"], strict=True):
        sample = load_npz(first["file"])
        measured = sample.configs[first["measured"]].reshape(first["budget"], -1)
        enough = len({row.tobytes() for row in measured}) >= 4
        assert (second["adapted"] > 0) == enough, first["file"]
        if not enough:  # the prior alone: the same picks as the first run
            assert second["measured"] == first["measured"]


def test_table_output_and_cli_errors(live_server: str, tile_path: Path) -> None:
    table = run_cli("--server", live_server, "--data", str(tile_path), "--budget", "3")
    assert table.exit_code == 0 and "replay of 1 graph(s)" in table.stdout
    assert any(
        line.lstrip("│ ").startswith("mean") for line in table.stdout.splitlines()
    )
    both = run_cli(
        "--data", str(tile_path), "--budget", "1", "--budget-fraction", "0.5"
    )
    assert both.exit_code == 2
    down = run_cli("--server", unused_url(), "--data", str(tile_path))
    assert down.exit_code == 1 and "replay failed" in down.output


def test_rounds_report_the_learning_curve(
    live_server: str, tile_paths: list[Path], layout_path: Path
) -> None:
    """3 rounds of 2 on the tile kernels and unet: feedback after each round adapts
    the next; the report has every strategy per round and keeps the final round's
    numbers at the top level."""
    result = run_cli(
        "--server",
        live_server,
        "--data",
        str(tile_paths[0].parent),
        "--data",
        str(layout_path),
        "--rounds",
        "3",
        "--budget",
        "2",
        "--target",
        "replay-rounds",
        "--json",
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rounds = report["rounds"]
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert [r["measured"] for r in rounds] == [2, 4, 6]
    for key in ("slowdown", "model_slowdown", "random_slowdown", "per_graph_slowdown"):
        values = [r[key] for r in rounds]
        assert all(v >= 0 for v in values)
        assert values == sorted(values, reverse=True), key  # best-so-far never worse
    assert report["mean"]["slowdown"] == pytest.approx(rounds[-1]["slowdown"])
    assert report["mean"]["random_slowdown"] == pytest.approx(
        rounds[-1]["random_slowdown"]
    )
    unet = by_name(report, "unet_3d")
    configs = load_npz(layout_path).configs[unet["measured"][:4]]
    distinct = len({c.tobytes() for c in configs})  # unet repeats some configs
    want = distinct if distinct >= 4 else 0  # the service adapts from 4 on
    assert [r["adapted"] for r in unet["rounds"]] == [0, 0, want]
    assert len(set(unet["measured"])) == 6 and unet["feedback_stored"] == 6
    taus = unet["rounds"][-1]["kendall_tau_unmeasured"]
    assert set(taus) == {"adapted", "model", "per_graph"}
    assert all(-1 <= t <= 1 for t in taus.values())
    adapted = []
    for g in report["graphs"]:
        sample = load_npz(g["file"])
        seen = len({c.tobytes() for c in sample.configs[g["measured"][:4]]})
        if len(g["rounds"]) == 3:
            assert g["rounds"][2]["adapted"] == (seen if seen >= 4 else 0), g["file"]
            adapted.append(g["rounds"][2]["adapted"])
        # a kernel with fewer configs than 6 runs out: every config measured once
        assert len(g["measured"]) == len(set(g["measured"])) == min(6, g["configs"])
        best = int(sample.runtimes[g["measured"]].min())
        assert g["best_found_ns"] == best
    assert max(adapted) >= 4  # fusion.191 at least
    table = run_cli(
        "--server",
        live_server,
        "--data",
        str(layout_path),
        "--rounds",
        "2",
        "--budget",
        "3",
        "--target",
        "replay-table",
    )
    assert table.exit_code == 0 and "learning curve" in table.stdout
