"""The harness end to end at tiny sizes: real redis-server, real uvicorn, real client.

Checks that ``--json`` prints every figure as a number, that the JSON and the plot are
written, and that every process the harness started is gone afterwards, also when a
phase fails.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from xla_costmodel.benchmarks import harness
from xla_costmodel.benchmarks.plan import SMOKE
from xla_costmodel.benchmarks.report import KEYS

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "models" / "artifacts"


def children() -> set[str]:
    """Command lines of live (not zombie) child processes of this test process.

    multiprocessing's resource tracker is left out: it is started once, on first use
    of a spawn context, and lives as long as the parent by design.
    """
    me = os.getpid()
    found = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if (
            int(fields[1]) == me
            and fields[0] != "Z"
            and "resource_tracker" not in cmdline
        ):
            found.add(f"{proc.name}: {cmdline}")
    return found


@pytest.fixture
def models() -> Path:
    if not (MODELS / "tile").is_dir() or not (MODELS / "layout").is_dir():
        pytest.fail(f"shipped artifacts missing under {MODELS} (run `make train`)")
    return MODELS


def test_smoke_run_prints_every_figure_and_stops_its_servers(
    tmp_path: Path, models: Path, shared_data: Path
) -> None:
    import typer

    from xla_costmodel.benchmarks.cli import bench

    app = typer.Typer()
    app.command()(bench)
    before = children()
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
    assert children() <= before


def test_servers_are_stopped_when_a_phase_fails(
    tmp_path: Path, models: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> dict[str, object]:
        raise RuntimeError("phase failed")

    monkeypatch.setattr(harness, "layout_figures", broken)
    before = children()
    opts = harness.Options(model_dir=models, out=tmp_path)
    with pytest.raises(RuntimeError, match="phase failed"):
        harness.run(SMOKE, opts, lambda _: None)
    assert children() <= before
