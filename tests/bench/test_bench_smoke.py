"""The harness end to end at tiny sizes: real redis-server, real uvicorn, real client.

Checks that ``--json`` prints every figure as a number, that the JSON and the plot are
written, and that every process the harness started is gone afterwards, also when a
phase fails.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from xla_costmodel.bench import harness
from xla_costmodel.bench.plan import SMOKE
from xla_costmodel.bench.report import KEYS
from xla_costmodel.harness import child_processes

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "models" / "artifacts"


@pytest.fixture
def models() -> Path:
    if not (MODELS / "tile").is_dir() or not (MODELS / "layout").is_dir():
        pytest.fail(f"shipped artifacts missing under {MODELS} (run `make train`)")
    return MODELS


def test_smoke_run_prints_every_figure_and_stops_its_servers(
    tmp_path: Path, models: Path, shared_data: Path
) -> None:
    import typer

    from xla_costmodel.bench.cli import bench

    app = typer.Typer()
    app.command()(bench)
    before = child_processes()
    args = ["--smoke", "--json", "--out", str(tmp_path), "--model-dir", str(models)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    for key in KEYS:
        value = figures[key]
        if value is None and key == "torch_eager_configs_per_s":
            assert figures["torch_eager_note"]  # no torch or no checkpoint: says why
            continue
        assert isinstance(value, int | float) and not isinstance(value, bool), key
    assert figures["cpu_count"] == os.cpu_count() and figures["mode"] == "smoke"
    assert figures["load_requests"] > 0
    # The Redis phase's untimed warm-up sends the graph inline (Redis may have dropped
    # a slow write: then the warm-up is a miss and refills it); every timed call hits.
    tiers = figures["layout_cache_tiers"]
    assert set(tiers["redis warm-up"]) <= {
        "redis+upload",
        "miss+upload",
        "redis",
        "miss",
    }
    assert set(tiers["redis"]) == {"redis"}
    # A graph the client has not seen travels inline with the first rank: a miss.
    assert set(figures["layout_cache_tiers"]["cold"]) == {"miss+upload"}
    assert Path(figures["plot"]).is_file() and (tmp_path / "bench_smoke.json").is_file()
    check_peer_figures(figures)
    check_fleet_figures(figures)
    assert child_processes() <= before


def check_fleet_figures(figures: dict[str, Any]) -> None:
    """Statements per rank as the service counts them, staleness across processes,
    2 workers on PostgreSQL against 2 on SQLite, all measured (PostgreSQL is part
    of the test environment: no note excuses them here)."""
    assert figures["statements_counted"]  # the counter moved before the ranks
    assert figures["statements_per_rank"] >= 0
    assert figures["staleness_trials"] == SMOKE.fleet.trials
    assert 0 < figures["staleness_p50_ms"] <= figures["staleness_ms"]
    assert figures["throughput_2w_postgres_rps"] > 0
    assert figures["throughput_2w_nodb_rps"] > 0
    assert figures["fleet_load_errors"] == 0


def check_peer_figures(figures: dict[str, Any]) -> None:
    """Ours vs KServe vs raw onnxruntime: every size has the three, and the ratios."""
    for key in ("empty_route_ms", "rank_1_config_ms", "rank_1_config_bare_ms"):
        assert figures[key] > 0, key
    if figures["peer_kserve_configs_per_s"] is None:  # no venv and none could be made
        assert "KServe" in figures["peer_kserve_note"]
        servers = {"raw", "ours"}
    else:
        assert figures["ours_over_kserve"] == pytest.approx(
            figures["http_binary_configs_per_s"] / figures["peer_kserve_configs_per_s"]
        )
        assert figures["peer_kserve_empty_route_ms"] > 0
        servers = {"raw", "ours", "kserve"}
    sizes = {str(n) for n in SMOKE.peer_sizes}
    for table in ("peer_latency_ms", "peer_throughput_configs_per_s"):
        assert set(figures[table]) == sizes, table
        for row in figures[table].values():
            assert all(row[s] > 0 for s in servers), (table, row)
    assert set(figures["ours_over_kserve_by_size"]) == sizes
    assert figures["peer_load_errors"] == 0 and figures["peer_clients"] == 2
    assert [row["workers"] for row in figures["workers_table"]] == [1]
    goals = figures["goals"]
    new_goals = {"ours_over_kserve", "rank_1_config_ms", "http_over_raw_at_scale"}
    assert new_goals <= set(goals)


def test_servers_are_stopped_when_a_phase_fails(
    tmp_path: Path, models: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> dict[str, object]:
        raise RuntimeError("phase failed")

    monkeypatch.setattr(harness, "layout_figures", broken)
    before = child_processes()
    opts = harness.Options(model_dir=models, out=tmp_path)
    with pytest.raises(RuntimeError, match="phase failed"):
        harness.run(SMOKE, opts, lambda _: None)
    assert child_processes() <= before
