"""Replay's arithmetic and bookkeeping, against brute force and the fake service."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import numpy as np
import pytest
from clientfakes import FakeService

from xla_costmodel.clients import CostModelClient, InvalidRequest
from xla_costmodel.clients.replay import (
    Budget,
    ReplayReport,
    default_config,
    replay,
    score_graph,
)
from xla_costmodel.tpugraphs.arrays import Sample


def test_budget() -> None:
    assert Budget(count=5).configs(3) == 3 and Budget(count=5).configs(100) == 5
    assert Budget(fraction=0.1).configs(579) == 58  # ceil(57.9)
    assert Budget(fraction=0.01).configs(2) == 1  # at least one config
    for bad in ({}, {"count": 1, "fraction": 0.5}, {"count": 0}, {"fraction": 1.5}):
        with pytest.raises(ValueError):
            Budget(**bad)  # type: ignore[arg-type]


def test_default_config(tile_sample: Sample, layout_sample: Sample) -> None:
    assert default_config(tile_sample) == 0  # its runtime is the normaliser
    assert default_config(layout_sample) is None


def test_score_graph_by_hand(tile_sample: Sample) -> None:
    runtimes = tile_sample.runtimes
    ranking = np.argsort(-runtimes).tolist()  # the worst possible model
    score = score_graph(tile_sample, ranking, 3)
    worst3 = sorted(runtimes)[-3:]
    assert score.measured == ranking[:3]
    assert score.best_found_ns == worst3[0]
    assert score.slowdown == worst3[0] / runtimes.min() - 1
    assert score.speedup_vs_default == runtimes[0] / worst3[0]
    assert score.measured_fraction == 3 / 579


def test_mean_skips_unknown_speedups() -> None:
    report = ReplayReport()
    assert report.mean()["slowdown"] is None
    payload = report.to_json()
    assert set(payload["mean"]) >= {
        "slowdown",
        "speedup_vs_default",
        "random_slowdown",
        "measured_fraction",
    }
    assert "slowdown" in payload["definitions"]


def test_replay_against_the_fake(
    tile_paths: list[Path], layout_path: Path, layout_sample: Sample, shared_data: Path
) -> None:
    fake = FakeService()
    test_file = shared_data / "npz/tile/xla/test/d6f5f54247bd1e58a10b9e7062c636ab.npz"
    with CostModelClient(transport=httpx.MockTransport(fake)) as client:
        report = replay(
            client, [*tile_paths[:2], layout_path, test_file], Budget(count=2)
        )
        again = replay(client, tile_paths[:2], Budget(count=2), model="tile")
    assert [g.model for g in report.graphs] == ["tile", "tile", "layout"]
    assert report.skipped == [
        {"file": str(test_file), "reason": "no measured runtimes (a test file)"}
    ]
    assert all(g.uploaded for g in report.graphs) and not any(
        g.uploaded for g in again.graphs
    )
    assert [g.feedback_stored for g in report.graphs] == [2, 2, 2]
    layout_feedback = fake.feedback_rows[2]
    measured = report.graphs[2].score.measured
    assert layout_feedback["runtimes_ns"] == layout_sample.runtimes[measured].tolist()
    assert np.array_equal(layout_feedback["configs"], layout_sample.configs[measured])
    assert layout_feedback["model_version"] == "1"


def test_replay_skips_other_collections_and_unknown_models(
    tile_paths: list[Path], layout_path: Path
) -> None:
    with CostModelClient(transport=httpx.MockTransport(FakeService())) as client:
        report = replay(
            client, [tile_paths[0], layout_path], Budget(count=1), model="layout"
        )
        assert [g.collection for g in report.graphs] == ["layout"]
        assert "no loaded model" in report.skipped[0]["reason"]
        with pytest.raises(InvalidRequest, match="not loaded"):
            replay(client, [layout_path], Budget(count=1), model="nope")


def test_missing_feedback_route_is_counted_not_fatal(
    tile_paths: list[Path], caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeService(feedback_route=False)
    with (
        caplog.at_level(logging.WARNING),
        CostModelClient(transport=httpx.MockTransport(fake)) as c,
    ):
        report = replay(c, tile_paths[:3], Budget(count=1))
    assert len(report.graphs) == 3 and report.feedback_unsupported
    assert [g.feedback_stored for g in report.graphs] == [None] * 3
    assert fake.paths().count("POST /v1/feedback") == 1  # asked once, then left alone
    assert report.to_json()["feedback"]["graphs_unsupported"] == 3
    assert "feedback unsupported" in caplog.text
