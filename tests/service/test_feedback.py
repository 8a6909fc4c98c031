"""POST /v1/feedback: stored lines, day files, online quality gauges, every refusal."""

from __future__ import annotations

import asyncio
import io
import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from servicekit import NPZ, AppClient, graph_json, metric

from service.core.feedback import (
    FeedbackEntry,
    FeedbackLog,
    OnlineQuality,
    Quality,
    measure,
)
from tpugraphs.arrays import Sample
from tpugraphs.metrics import kendall_tau, topk_slowdown

pytestmark = pytest.mark.anyio
TAU = "costmodel_online_kendall_tau"
SLOWDOWN = "costmodel_online_top1_slowdown"
STORED = "costmodel_feedback_measurements_total"


@pytest.fixture
def feedback_dir(tmp_path: Path) -> Path:
    return tmp_path / "feedback"


@pytest.fixture
async def fb(make_client: AppClient, feedback_dir: Path) -> httpx.AsyncClient:
    return await make_client(feedback_dir=feedback_dir)  # type: ignore[no-any-return]


async def upload(client: httpx.AsyncClient, model: str, sample: Sample) -> str:
    r = await client.put(f"/v1/graphs?model={model}", json=graph_json(sample))
    assert r.status_code == 200, r.text
    return str(r.json()["graph_id"])


async def rank(
    client: httpx.AsyncClient, model: str, gid: str, configs: np.ndarray
) -> np.ndarray:
    body = {"model": model, "graph_id": gid, "configs": configs.tolist()}
    r = await client.post("/v1/rank", json=body)
    assert r.status_code == 200, r.text
    return np.asarray(r.json()["scores"])


def lines(directory: Path) -> list[dict[str, Any]]:
    files = sorted(directory.glob("feedback-*.jsonl"))
    return [json.loads(line) for f in files for line in f.read_text().splitlines()]


@pytest.mark.parametrize("model", ["tile", "layout"])
async def test_a_stored_line_round_trips(
    fb: httpx.AsyncClient,
    feedback_dir: Path,
    kernel: Sample,
    small_layout: Sample,
    model: str,
) -> None:
    sample = kernel if model == "tile" else small_layout
    gid = await upload(fb, model, sample)
    configs = sample.configs[:6]
    scores = await rank(fb, model, gid, configs)
    runtimes = [int(r) for r in np.arange(6) * 7 + 100]
    body = {"model": model, "graph_id": gid, "configs": configs.tolist(),
            "runtimes_ns": runtimes}  # fmt: skip
    r = await fb.post("/v1/feedback", json=body, headers={"x-request-id": "fb-1"})
    assert r.status_code == 200, r.text
    answer = r.json()
    want = measure(scores, runtimes)
    assert answer == {
        "stored": 6, "model": model, "model_version": "1", "graph_id": gid,
        "kendall_tau": pytest.approx(want.kendall_tau),
        "top1_slowdown": pytest.approx(want.top1_slowdown),
    }  # fmt: skip
    [line] = lines(feedback_dir)
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    assert [p.name for p in feedback_dir.iterdir()] == [f"feedback-{day}.jsonl"]
    assert line["time"].startswith(day) and line["time"].endswith("Z")
    assert (line["format"], line["request_id"], line["model"]) == (1, "fb-1", model)
    assert (line["model_version"], line["graph_id"]) == ("1", gid)
    assert line["config_indices"] is None and line["runtimes_ns"] == runtimes
    assert np.array_equal(np.asarray(line["configs"]), configs)
    assert "." not in json.dumps(line["configs"])  # integral features as ints
    np.testing.assert_allclose(line["scores"], scores, rtol=1e-6)
    assert line["kendall_tau"] == answer["kendall_tau"]
    assert line["top1_slowdown"] == answer["top1_slowdown"]


def test_one_file_per_utc_day(tmp_path: Path) -> None:
    times = iter([
        datetime(2026, 3, 1, 23, 59, 59, tzinfo=UTC),
        datetime(2026, 3, 2, 0, 0, 0, tzinfo=UTC),
        datetime(2026, 3, 1, 20, 30, tzinfo=timezone(timedelta(hours=-5))),  # UTC: 2nd
    ])  # fmt: skip
    log = FeedbackLog(tmp_path / "fb", clock=lambda: next(times))
    for i in range(3):
        log.write(entry(request_id=f"r{i}"))
    day1, day2 = sorted((tmp_path / "fb").iterdir())
    assert (day1.name, day2.name) == ("feedback-2026-03-01.jsonl",
                                      "feedback-2026-03-02.jsonl")  # fmt: skip
    first = [json.loads(x) for x in day1.read_text().splitlines()]
    second = [json.loads(x) for x in day2.read_text().splitlines()]
    assert [x["request_id"] for x in first] == ["r0"]
    assert [x["request_id"] for x in second] == ["r1", "r2"]
    assert [x["time"] for x in second] == [
        "2026-03-02T00:00:00.000000Z", "2026-03-02T01:30:00.000000Z",
    ]  # fmt: skip


def entry(**change: Any) -> FeedbackEntry:
    base: dict[str, Any] = {
        "request_id": "r", "model": "tile", "model_version": "1",
        "graph_id": "0" * 64, "config_indices": None,
        "configs": np.array([[0.5] * 24, [1.0] * 24], np.float32),
        "runtimes_ns": np.array([10, 20], np.int64),
        "scores": np.array([0.1, 0.2], np.float32),
    }  # fmt: skip
    return FeedbackEntry(**{**base, **change})


def test_measure_uses_the_training_metrics_and_skips_undefined_values() -> None:
    scores, runtimes = [0.3, 0.1, 0.2, 0.4], [30, 25, 10, 40]
    q = measure(scores, runtimes)
    assert q.kendall_tau == pytest.approx(kendall_tau(scores, runtimes))
    assert q.top1_slowdown == pytest.approx(topk_slowdown(scores, runtimes, 1))
    assert q.top1_slowdown == pytest.approx(1.5)  # picked 25 ns, best is 10 ns
    assert measure([0.1, 0.2], [5, 5]) == measure([0.1], [5]) == Quality(None, None)
    online = OnlineQuality()
    assert online.add("tile", "1", Quality(1.0, 0.0)) == Quality(1.0, 0.0)
    assert online.add("tile", "1", Quality(None, None)) == Quality(1.0, 0.0)
    assert online.add("tile", "1", Quality(-1.0, 2.0)) == Quality(0.0, 1.0)
    assert online.add("tile", "2", Quality(None, None)) == Quality(None, None)


async def test_gauges_follow_the_models_own_order(
    fb: httpx.AsyncClient, kernel: Sample
) -> None:
    gid = await upload(fb, "tile", kernel)
    scores = await rank(fb, "tile", gid, kernel.configs)
    distinct = np.unique(scores, return_index=True)[1][:8]  # 8 configs, no tied scores
    configs, order = kernel.configs[distinct], np.argsort(scores[distinct])
    runtimes = np.empty(8, np.int64)
    runtimes[order] = np.arange(1, 9) * 1000  # the model's order exactly
    answers = []
    for measured in (runtimes, 9000 - runtimes, [5] * 8):
        body = {"model": "tile", "graph_id": gid, "configs": configs.tolist(),
                "runtimes_ns": [int(x) for x in measured]}  # fmt: skip
        r = await fb.post("/v1/feedback", json=body)
        assert r.status_code == 200, r.text
        text = (await fb.get("/metrics")).text
        labels = {"model": "tile", "version": "1"}
        answers.append((r.json()["kendall_tau"], r.json()["top1_slowdown"],
                        metric(text, TAU, **labels), metric(text, SLOWDOWN, **labels),
                        metric(text, STORED, model="tile")))  # fmt: skip
    assert answers[0] == (1.0, 0.0, 1.0, 0.0, 8)
    assert answers[1] == (
        -1.0,
        7.0,
        0.0,
        3.5,
        16,
    )  # reversed: picked 8000 ns, best 1000
    assert answers[2] == (None, None, 0.0, 3.5, 24)  # equal runtimes: means unchanged


async def test_config_indices_name_the_latest_ranking(
    make_client: AppClient, feedback_dir: Path, kernel: Sample
) -> None:
    fb = await make_client(feedback_dir=feedback_dir)
    gid = await upload(fb, "tile", kernel)
    body = {"model": "tile", "graph_id": gid, "config_indices": [3, 0, 3],
            "runtimes_ns": [30, 10, 31]}  # fmt: skip
    r = await fb.post("/v1/feedback", json=body)
    assert r.status_code == 409 and r.json()["error"]["code"] == "ranking_not_found"
    assert r.json()["error"]["field"] == "config_indices"
    await rank(fb, "tile", gid, kernel.configs[:50])
    latest = kernel.configs[100:110]
    scores = await rank(fb, "tile", gid, latest)
    r = await fb.post("/v1/feedback", json={**body, "model_version": "1"})
    assert r.status_code == 200 and r.json()["stored"] == 3, r.text
    [line] = lines(feedback_dir)
    assert line["config_indices"] == [3, 0, 3]
    assert np.array_equal(np.asarray(line["configs"]), latest[[3, 0, 3]])
    assert line["scores"] == scores[[3, 0, 3]].tolist()
    r = await fb.post("/v1/feedback", json={**body, "config_indices": [0, 10, 1]})
    assert (r.status_code, r.json()["error"]["field"]) == (422, "config_indices[1]")
    # The memory is bounded: with no room, nothing is remembered.
    small = await make_client(feedback_dir=feedback_dir, recent_rankings_bytes=0)
    await upload(small, "tile", kernel)
    await rank(small, "tile", gid, latest)
    r = await small.post("/v1/feedback", json=body)
    assert r.status_code == 409 and r.json()["error"]["code"] == "ranking_not_found"


Build = Callable[[str, str], dict[str, Any]]  # (tile graph id, layout graph id)


def body(gid: str, **change: Any) -> dict[str, Any]:
    """A JSON feedback body (NaN allowed, as some clients send it); None drops a key."""
    base = {"model": "tile", "graph_id": gid, "configs": [[1] * 24] * 2,
            "runtimes_ns": [10, 20]}  # fmt: skip
    fields = {k: v for k, v in {**base, **change}.items() if v is not None}
    return {"content": json.dumps(fields), "headers": JSON}


JSON = {"content-type": "application/json"}
# (name, status, code, field, request builder)
CASES: list[tuple[str, int, str, str | None, Build]] = [
    ("tile width", 422, "invalid_request", "configs",
     lambda t, u: body(t, configs=[[1] * 23] * 2)),
    ("layout width", 422, "invalid_request", "configs",
     lambda t, u: body(u, model="layout", configs=[[[1] * 17] * 38] * 2)),
    ("ragged", 422, "invalid_request", "configs",
     lambda t, u: body(t, configs=[[1] * 24, [1]])),
    ("NaN", 422, "invalid_request", "configs",
     lambda t, u: body(t, configs=[[float("nan")] * 24] * 2)),
    ("zero runtime", 422, "invalid_request", "runtimes_ns[1]",
     lambda t, u: body(t, runtimes_ns=[5, 0])),
    ("negative runtime", 422, "invalid_request", "runtimes_ns[0]",
     lambda t, u: body(t, runtimes_ns=[-5, 1])),
    ("huge runtime", 422, "invalid_request", "runtimes_ns[0]",
     lambda t, u: body(t, runtimes_ns=[2**63, 1])),
    ("float runtime", 422, "invalid_request", "runtimes_ns",
     lambda t, u: body(t, runtimes_ns=[1.5, 2])),
    ("no runtimes", 422, "invalid_request", "runtimes_ns",
     lambda t, u: body(t, runtimes_ns=[])),
    ("length mismatch", 422, "invalid_request", "runtimes_ns",
     lambda t, u: body(t, runtimes_ns=[1])),
    ("both", 422, "invalid_request", "configs",
     lambda t, u: body(t, config_indices=[0, 1])),
    ("neither", 422, "invalid_request", "configs", lambda t, u: body(t, configs=None)),
    ("negative index", 422, "invalid_request", "config_indices[0]",
     lambda t, u: body(t, configs=None, config_indices=[-1, 0])),
    ("index too big", 422, "invalid_request", "config_indices[1]",
     lambda t, u: body(t, configs=None, config_indices=[0, 2])),
    ("bool index", 422, "invalid_request", "config_indices",
     lambda t, u: body(t, configs=None, config_indices=[True, 0])),
    ("extra key", 422, "invalid_request", "top_k", lambda t, u: body(t, top_k=1)),
    ("bad graph_id", 422, "invalid_request", "graph_id", lambda t, u: body("abc")),
    ("unknown graph", 404, "graph_not_found", "graph_id", lambda t, u: body("0" * 64)),
    ("unknown model", 404, "model_not_found", "model",
     lambda t, u: body(t, model="nope")),
    ("version not loaded", 409, "model_version_not_loaded", "model_version",
     lambda t, u: body(t, model_version="99")),
    ("never ranked", 409, "ranking_not_found", "config_indices",
     lambda t, u: body(u, model="layout", configs=None, config_indices=[0, 1])),
    ("malformed", 400, "malformed_body", "body",
     lambda t, u: {"content": b"{", "headers": JSON}),
    ("npz", 415, "unsupported_media_type", "content-type",
     lambda t, u: {"content": b"PK", "headers": NPZ}),
]  # fmt: skip


async def test_bad_inputs(
    fb: httpx.AsyncClient, feedback_dir: Path, kernel: Sample, small_layout: Sample
) -> None:
    """One app for all cases; each checks status, code and field; nothing is stored."""
    tile, layout = (
        await upload(fb, "tile", kernel),
        await upload(fb, "layout", small_layout),
    )
    await rank(fb, "tile", tile, kernel.configs[:2])
    failures = []
    for name, status, code, field, build in CASES:
        r = await fb.post("/v1/feedback", **build(tile, layout))
        err = r.json().get("error", {})
        if (r.status_code, err.get("code"), err.get("field")) != (status, code, field):
            failures.append(f"{name}: {r.status_code} {r.text[:200]}")
    assert not failures, "\n".join(failures)
    assert not feedback_dir.exists() or lines(feedback_dir) == []
    metrics = (await fb.get("/metrics")).text
    assert metric(metrics, STORED, model="tile") == 0 and 'status="500"' not in metrics


@contextmanager
def broken(directory: Path, failure: str) -> Iterator[None]:
    """Writes under ``directory`` fail inside the block; it is repaired on exit."""
    if failure == "not a directory":  # ENOTDIR
        directory.write_text("a file where the directory should be")
        repair = directory.unlink
    elif failure == "disk full":  # today's and tomorrow's files are /dev/full: ENOSPC
        directory.mkdir()
        now = datetime.now(UTC)
        for when in (now, now + timedelta(days=1)):
            (directory / f"feedback-{when:%Y-%m-%d}.jsonl").symlink_to("/dev/full")
        repair = partial(shutil.rmtree, directory)
    else:
        raise ValueError(failure)
    try:
        yield
    finally:
        repair()


# Both failures work as root too (file modes would not stop root from writing).
@pytest.mark.parametrize("failure", ["disk full", "not a directory"])
async def test_a_write_failure_is_503_and_nothing_is_acknowledged(
    make_client: AppClient, tmp_path: Path, kernel: Sample, failure: str
) -> None:
    directory = tmp_path / "fb"
    fb = await make_client(feedback_dir=directory)
    gid = await upload(fb, "tile", kernel)
    body = {"model": "tile", "graph_id": gid, "configs": kernel.configs[:2].tolist(),
            "runtimes_ns": [10, 20]}  # fmt: skip
    with broken(directory, failure):
        r = await fb.post("/v1/feedback", json=body)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "feedback_unavailable"
        assert r.headers["retry-after"] == "5"
        # Nothing written: no file but the /dev/full links (never read: endless).
        assert not directory.is_dir() or all(
            f.is_symlink() for f in directory.iterdir()
        )
    metrics = (await fb.get("/metrics")).text
    assert metric(metrics, STORED, model="tile") == 0
    assert f"{TAU}{{" not in metrics and f"{SLOWDOWN}{{" not in metrics
    # Not acknowledged, so the client resends; once the disk is back it is stored.
    r = await fb.post("/v1/feedback", json=body)
    assert r.status_code == 200 and len(lines(directory)) == 1
    assert metric((await fb.get("/metrics")).text, STORED, model="tile") == 2


async def test_concurrent_feedback_writes_whole_lines(
    fb: httpx.AsyncClient, feedback_dir: Path, kernel: Sample
) -> None:
    gid = await upload(fb, "tile", kernel)
    configs = kernel.configs[:300].tolist()
    posts = [
        fb.post("/v1/feedback", json={"model": "tile", "graph_id": gid,
                                      "configs": configs, "runtimes_ns": [i + 1] * 300})
        for i in range(12)
    ]  # fmt: skip
    answers = await asyncio.gather(*posts)
    assert {r.status_code for r in answers} == {200}
    stored = lines(feedback_dir)
    assert sorted(x["runtimes_ns"][0] for x in stored) == list(range(1, 13))
    assert all(len(x["configs"]) == 300 for x in stored)


async def test_openapi_documents_the_route(fb: httpx.AsyncClient) -> None:
    spec = (await fb.get("/openapi.json")).json()
    post = spec["paths"]["/v1/feedback"]["post"]
    assert {"200", "404", "409", "422", "503"} <= set(post["responses"])
    schemas = spec["components"]["schemas"]
    assert {"FeedbackIn", "FeedbackOut"} <= set(schemas)
    assert schemas["FeedbackIn"]["examples"] and schemas["FeedbackOut"]["examples"]


async def test_config_indices_after_a_compact_layout_batch(
    fb: httpx.AsyncClient, feedback_dir: Path, small_layout: Sample
) -> None:
    """An int8 npz batch is remembered as sent and stored as the integers it holds."""
    gid = await upload(fb, "layout", small_layout)
    configs = small_layout.configs[:20].astype(np.int8)
    buf = io.BytesIO()
    np.savez(buf, node_config_feat=configs)
    r = await fb.post(
        f"/v1/rank?model=layout&graph_id={gid}",
        content=buf.getvalue(),
        headers={"Content-Type": "application/x-npz"},
    )
    assert r.status_code == 200, r.text
    scores = np.asarray(r.json()["scores"])
    body = {"model": "layout", "graph_id": gid, "config_indices": [4, 19],
            "runtimes_ns": [200, 100]}  # fmt: skip
    r = await fb.post("/v1/feedback", json=body)
    assert r.status_code == 200, r.text
    [line] = lines(feedback_dir)
    assert line["configs"] == configs[[4, 19]].astype(np.int64).tolist()
    assert line["scores"] == scores[[4, 19]].tolist()


@pytest.mark.parametrize("value", [1e20, 3e38, 2.0**53, -(2.0**63)])
async def test_large_integral_configs_are_stored_as_sent(
    fb: httpx.AsyncClient, feedback_dir: Path, kernel: Sample, value: float
) -> None:
    """int64 cannot hold them: ``astype`` wrapped 1e20 to -2**63 in the log."""
    gid = await upload(fb, "tile", kernel)
    configs = [[value] * 24, [1.0] * 24]
    r = await fb.post("/v1/feedback", **body(gid, configs=configs))
    assert r.status_code == 200, r.text
    [line] = lines(feedback_dir)
    stored = np.float32(value)  # the service scores and stores float32
    assert line["configs"][0] == [float(stored)] * 24
    assert line["configs"][1] == [1.0] * 24


async def test_small_integral_configs_stay_ints(
    fb: httpx.AsyncClient, feedback_dir: Path, kernel: Sample
) -> None:
    gid = await upload(fb, "tile", kernel)
    configs = [[2.0**52] * 24, [-3.0] * 24]
    r = await fb.post("/v1/feedback", **body(gid, configs=configs))
    assert r.status_code == 200, r.text
    [line] = lines(feedback_dir)
    assert line["configs"] == [[2**52] * 24, [-3] * 24]
