"""Unit tests of the harness's pieces: data, timing, report (no processes)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from xla_costmodel.bench.data import (
    fresh_copy,
    synth_tile_configs,
    tile_workload,
)
from xla_costmodel.bench.inproc import take_rows
from xla_costmodel.bench.plan import FULL, PLANS, QUICK
from xla_costmodel.bench.report import KEYS, add_ratios, markdown, missing_keys
from xla_costmodel.bench.timing import percentile, time_calls
from xla_costmodel.tpugraphs.graph_id import graph_id

REPO = Path(__file__).resolve().parents[2]


def test_synthetic_tile_configs_keep_sums_and_products(shared_data: Path) -> None:
    workload = tile_workload(pool=2_000, root=shared_data)
    real = workload.main.configs
    rows = synth_tile_configs(real, 2_000, np.random.default_rng(0))
    assert rows.shape == (2_000, 24) and rows.dtype == np.float32
    for start in (0, 8, 16):
        dims = rows[:, start : start + 6]
        assert np.array_equal(rows[:, start + 6], dims.sum(axis=1))
        present = dims > 0
        product = np.where(present, dims, 1).prod(axis=1)
        assert np.array_equal(
            rows[:, start + 7], np.where(present.any(axis=1), product, 0)
        )
    # Values stay in the real range (halved or doubled at most), zeros stay zeros.
    assert rows.min() >= 0 and rows[:, :6].max() <= 2 * max(real[:, :6].max(), 1)
    assert not rows[:, real.any(axis=0) == 0].any()


def test_fresh_copy_is_a_new_graph_with_the_same_shape(shared_data: Path) -> None:
    graph = tile_workload(pool=1, root=shared_data).main.graph
    copies = [fresh_copy(graph, k) for k in range(3)]
    ids = {graph_id(g.node_feat, g.node_opcode, g.edge_index) for g in [graph, *copies]}
    assert len(ids) == 4
    assert all(g.node_feat.shape == graph.node_feat.shape for g in copies)
    assert graph.node_feat[0, 1] == 0  # the original is untouched


def test_take_rows_tiles_beyond_the_pool() -> None:
    pool = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert take_rows(pool, 2).shape == (2, 3)
    big = take_rows(pool, 10)
    assert big.shape == (10, 3) and np.array_equal(big[4:8], pool)


def test_time_calls_stops_at_the_budget() -> None:
    calls = []
    start = time.monotonic()
    timings = time_calls(
        lambda: (calls.append(1), time.sleep(0.02)), 1_000, 0.1, warmup=1
    )
    assert time.monotonic() - start < 1.0
    assert 1 <= len(timings.seconds) < 20 and len(calls) == len(timings.seconds) + 1


def test_time_calls_runs_setup_untimed() -> None:
    timings = time_calls(
        lambda: None, 3, 10.0, warmup=0, setup=lambda: time.sleep(0.05)
    )
    assert len(timings.seconds) == 3 and max(timings.seconds) < 0.04


def test_percentile() -> None:
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0], 100) == 2.0
    assert np.isnan(percentile([], 50))


def test_report_ratios_goals_and_missing_keys() -> None:
    result: dict[str, object] = {key: 1.0 for key in KEYS}
    result.update(
        raw_scorer_configs_per_s=100.0,
        http_binary_configs_per_s=80.0,
        http_json_configs_per_s=10.0,
        layout_cold_ms=300.0,
        layout_cached_ms=10.0,
        load_errors=0,
        load_p50_ms=10.0,
        load_p99_ms=20.0,
        peer_kserve_configs_per_s=10.0,
        peer_throughput_configs_per_s={
            "1": {"ours": 3.0, "kserve": 1.0},
            "10000": {"ours": 30.0, "kserve": 10.0},
        },
        peer_latency_ms={"1": {"ours": 1.0, "kserve": 2.0}},
        statements_per_rank=0.0,
    )
    add_ratios(result)  # type: ignore[arg-type]
    assert result["ours_over_kserve_p50_by_size"] == {"1": 2.0}
    assert result["http_over_raw"] == pytest.approx(0.8)
    assert result["binary_over_json"] == pytest.approx(8.0)
    assert result["cache_speedup"] == pytest.approx(30.0)
    assert all(result["goals"].values())  # type: ignore[union-attr]
    assert missing_keys(result) == []
    result["load_rps"] = None
    assert missing_keys(result) == ["load_rps"]


def test_torch_figure_may_be_null_only_with_a_reason() -> None:
    result: dict[str, object] = {key: 1.0 for key in KEYS}
    result["torch_eager_configs_per_s"] = None
    assert missing_keys({**result, "torch_eager_note": "torch is not installed"}) == []
    assert missing_keys(result) == ["torch_eager_configs_per_s"]


def test_plans_are_bounded() -> None:
    assert QUICK.load.seconds <= 10 and FULL.load.seconds <= 120
    for plan in PLANS.values():
        assert plan.load.max_requests > 0 and plan.load.clients > 0
        budgets = [
            plan.raw,
            plan.torch,
            plan.http,
            plan.encoder,
            plan.layout_cold,
            plan.layout_cached,
            plan.layout_redis,
            plan.layout_all,
        ]
        assert all(b.repeats >= 1 and b.seconds > 0 for b in budgets)


def test_torch_phase_without_a_checkpoint_says_why(
    tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from xla_costmodel.bench import torch_eager
    from xla_costmodel.bench.inproc import Budget

    monkeypatch.setattr(torch_eager, "CHECKPOINTS", tmp_path / "checkpoints")
    graph = tile_workload(pool=1, root=shared_data).main.graph
    configs = np.zeros((4, 24), np.float32)
    result = torch_eager.tile_scorer(
        tmp_path / "tile" / "1", graph, configs, configs[:, 0], Budget(1, 1.0), 1
    )
    assert result.timings is None and "checkpoint.pt" in result.note
    assert result.figures(4)["torch_eager_configs_per_s"] is None


def test_server_env_option_parses_pairs() -> None:
    import typer

    from xla_costmodel.bench.cli import parse_env

    assert parse_env(["COSTMODEL_A=1", "COSTMODEL_B=x=y"]) == {
        "COSTMODEL_A": "1",
        "COSTMODEL_B": "x=y",
    }
    with pytest.raises(typer.BadParameter):
        parse_env(["COSTMODEL_A"])


def test_fresh_copy_costs_and_scores_the_same(shared_data: Path) -> None:
    """The cold phase's copies must be the same work and the same answer."""
    from xla_costmodel.bench.data import SMALL_LAYOUT_GRAPH, layout_sample
    from xla_costmodel.bench.harness import latest
    from xla_costmodel.runner import ArtifactRunner

    models = Path(__file__).resolve().parents[2] / "models" / "artifacts"
    if not (models / "layout").is_dir():
        pytest.fail(f"shipped artifacts missing under {models}")
    sample = layout_sample(SMALL_LAYOUT_GRAPH, shared_data)
    runner = ArtifactRunner(latest(models, "layout"))
    original = runner.encode(sample.graph)
    copy = runner.encode(fresh_copy(sample.graph, 7))
    for name, value in original.items():
        assert np.array_equal(value, copy[name]), name


def test_torch_phase_finds_the_shipped_checkpoint_of_the_served_model(
    shared_data: Path,
) -> None:
    """A fresh clone times eager PyTorch: the checkpoint ships beside the artifacts."""
    from xla_costmodel.bench import torch_eager
    from xla_costmodel.bench.inproc import Budget, open_runner

    artifact = REPO / "models" / "artifacts" / "tile" / "1"
    assert torch_eager.checkpoint_path(artifact) == (
        REPO / "models" / "checkpoints" / "tile" / "1" / "checkpoint.pt"
    )
    workload = tile_workload(pool=256, root=shared_data)
    runner = open_runner(artifact, 1)
    configs = workload.main_configs
    scores = runner.score(runner.encode(workload.main.graph), configs)
    result = torch_eager.tile_scorer(
        artifact, workload.main.graph, configs, scores, Budget(2, 1.0), 1
    )
    assert result.timings is not None, result.note
    assert result.max_abs_diff is not None and result.max_abs_diff < 1e-3


def test_peer_ratios_and_goals_come_from_the_same_run() -> None:
    result: dict[str, object] = {key: 1.0 for key in KEYS}
    result.update(
        http_binary_configs_per_s=900.0,
        peer_kserve_configs_per_s=100.0,
        raw_scorer_configs_per_s=1000.0,
        empty_route_ms=1.0,
        rank_1_config_ms=1.4,
        peer_throughput_configs_per_s={
            "1": {"ours": 5.0, "kserve": 10.0},
            "64": {"ours": 40.0, "kserve": 10.0},
        },
    )
    add_ratios(result)  # type: ignore[arg-type]
    assert result["ours_over_kserve"] == pytest.approx(9.0)
    assert result["ours_over_kserve_by_size"] == {"1": 0.5, "64": 4.0}
    goals = result["goals"]
    assert goals["ours_over_kserve"] and goals["rank_1_config_ms"]  # type: ignore[index]
    assert goals["http_over_raw_at_scale"]  # type: ignore[index]
    # 1 config at half KServe's rate misses "at every size" even though 64 meets it.
    assert not goals["ours_over_kserve_every_size"]  # type: ignore[index]
    assert not goals["ours_over_kserve_at_10000"]  # type: ignore[index]  # not run
    result["rank_1_config_ms"] = 1.6
    add_ratios(result)  # type: ignore[arg-type]
    assert not result["goals"]["rank_1_config_ms"]  # type: ignore[index]


def test_kserve_figures_may_be_null_only_with_a_reason() -> None:
    result: dict[str, object] = {key: 1.0 for key in KEYS}
    result.update(peer_kserve_configs_per_s=None, ours_over_kserve=None)
    assert missing_keys(result) == ["peer_kserve_configs_per_s", "ours_over_kserve"]
    note = {"peer_kserve_note": "KServe could not run: no index"}
    assert missing_keys({**result, **note}) == []
    # Our own fixed-cost figures are never excused.
    unexcused = {**result, **note, "empty_route_ms": None}
    assert missing_keys(unexcused) == ["empty_route_ms"]


def test_fleet_figures_may_be_null_only_with_a_reason() -> None:
    result: dict[str, object] = {key: 1.0 for key in KEYS}
    result.update(statements_per_rank=None, postgres_over_nodb=None)
    assert missing_keys(result) == ["statements_per_rank", "postgres_over_nodb"]
    assert missing_keys({**result, "fleet_note": "PostgreSQL could not run"}) == []
    add_ratios(result)  # type: ignore[arg-type]
    goals = result["goals"]
    assert not goals["statements_per_rank"]  # type: ignore[index]  # null: missed
    result["statements_per_rank"] = 0.0
    add_ratios(result)  # type: ignore[arg-type]
    assert result["goals"]["statements_per_rank"]  # type: ignore[index]


def test_v2_binary_request_and_answer_round_trip() -> None:
    """The bytes follow the Open Inference Protocol's binary extension: a JSON header
    of the stated length with an id, then the tensors in order, little-endian."""
    import json

    import httpx

    from xla_costmodel.bench.peer_kserve import (
        HEADER_LENGTH,
        decode_scores,
        encode_infer,
    )

    embedding = np.arange(64, dtype=np.float32)
    configs = np.arange(48, dtype=np.float32).reshape(2, 24)
    body, head = encode_infer(embedding, configs, "7")
    header = json.loads(body[:head])
    assert header["id"] == "7" and header["parameters"]["binary_data_output"]
    sizes = [i["parameters"]["binary_data_size"] for i in header["inputs"]]
    assert sizes == [256, 192] and len(body) == head + 448
    assert [i["shape"] for i in header["inputs"]] == [[64], [2, 24]]
    sent = np.frombuffer(body[head + 256 :], "<f4").reshape(2, 24)
    assert np.array_equal(sent, configs)

    scores = np.array([0.5, -1.0], np.float32)
    out = json.dumps(
        {
            "outputs": [
                {
                    "name": "scores",
                    "datatype": "FP32",
                    "shape": [2],
                    "parameters": {"binary_data_size": 8},
                }
            ]
        }
    ).encode()
    binary = httpx.Response(
        200, headers={HEADER_LENGTH: str(len(out))}, content=out + scores.tobytes()
    )
    assert np.array_equal(decode_scores(binary), scores)
    # A server that ignored the request for binary outputs answers JSON: still read.
    answer = {"outputs": [{"name": "scores", "data": [0.5, -1.0]}]}
    plain = httpx.Response(200, json=answer)
    assert np.array_equal(decode_scores(plain), scores)


def test_markdown_has_the_figures_the_peer_table_and_the_workers_table() -> None:
    result: dict[str, object] = {key: 2.0 for key in KEYS}
    result.update(
        mode="full",
        date="2026-11-24",
        machine="cpu",
        cpu_count=2,
        wall_s=9.0,
        loadavg_before=[0.5, 0.4, 0.3],
        peer_clients=8,
        peer_latency_ms={
            "1": {"raw": 0.05, "ours": 1.5, "kserve": 3.0},
            "10000": {"raw": 1.0, "ours": 9.0, "kserve": 60.0},
        },
        peer_throughput_configs_per_s={
            "1": {"raw": 2e4, "ours": 600.0, "kserve": 300.0},
            "10000": {"raw": 1e7, "ours": 1.2e6, "kserve": 1.5e5},
        },
        ours_over_kserve_by_size={"1": 2.0, "10000": 8.0},
        workers_table=[
            {"workers": 1, "1": 600.0, "10000": 1.2e6},
            {"workers": 2, "1": 900.0, "10000": 1.5e6},
        ],
    )
    add_ratios(result)  # type: ignore[arg-type]
    text = markdown(result)
    assert "| `load_rps` (" in text and "under 8 clients" in text
    assert "| 10,000 | 1 | 9 | 60.0 | 10,000,000 | 1,200,000 | 150,000 | 8 |" in text
    assert "| workers | 1 configs | 10,000 configs |" in text
    assert "| 2 | 900.0 | 1,500,000 |" in text
    assert text.rstrip().endswith("9.0 s.")
