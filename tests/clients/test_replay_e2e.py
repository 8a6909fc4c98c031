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

from clients import CostModelClient
from clients.cli import replay
from tpugraphs.reader import load_npz

BUDGET_FRACTION = 0.1


def run_cli(*args: str) -> Any:
    app = typer.Typer()
    app.command()(replay)
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def data_args(tile_paths: list[Path], layout_path: Path) -> list[str]:
    return ["--data", str(tile_paths[0].parent), "--data", str(layout_path)]


@pytest.fixture(scope="module")
def report(live_server: str, data_args: list[str]) -> dict[str, Any]:
    result = run_cli("--server", live_server, *data_args,
                     "--budget-fraction", str(BUDGET_FRACTION), "--json")  # fmt: skip
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
        "slowdown", "speedup_vs_default", "random_slowdown", "measured_fraction"
    }  # fmt: skip
    for g in report["graphs"]:
        assert g["slowdown"] >= 0 and g["random_slowdown"] >= 0
        assert 1 <= g["budget"] == math.ceil(BUDGET_FRACTION * g["configs"])


def test_one_tile_graph_by_hand(
    live_server: str, report: dict[str, Any], tile_path: Path
) -> None:
    """fusion.191 (579 configs): redo the autotuner's arithmetic independently."""
    sample = load_npz(tile_path)
    with CostModelClient(live_server) as client:
        ranking = client.rank("tile", tile_path, sample.configs).ranking
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
    ) / math.comb(n, k)  # fmt: skip
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


def test_second_run_uses_the_cache_and_agrees(
    live_server: str, report: dict[str, Any], data_args: list[str]
) -> None:
    result = run_cli("--server", live_server, *data_args,
                     "--budget-fraction", str(BUDGET_FRACTION), "--json")  # fmt: skip
    again = json.loads(result.stdout)
    # A new client sends each graph inline once; the service finds every embedding
    # cached and encodes nothing.
    assert all(g["uploaded"] for g in again["graphs"])
    assert {g["cache"] for g in again["graphs"]} <= {"memory", "redis"}
    assert [g["measured"] for g in again["graphs"]] == [
        g["measured"] for g in report["graphs"]
    ]


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
