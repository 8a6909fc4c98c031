"""``costmodel serve --workers 2`` as a real process: both workers answer, /metrics
counts every request whichever worker served it, and what one worker learns
(feedback, remembered rankings) changes the answers of the other.

Which worker answered is read from the workers' own metric files (one per process,
named by PID, in the multiprocess directory), so responses carry no worker identity.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import sqlalchemy as sa
from prometheus_client.multiprocess import MultiProcessCollector
from servicekit import ADMIN, graph_json, metric

from xla_costmodel.harness import ServiceServer
from xla_costmodel.service.settings import Settings
from xla_costmodel.service.store import default_sqlite_url
from xla_costmodel.service.store.schema import measurements
from xla_costmodel.service.workers import patched_environ, settings_env
from xla_costmodel.tpugraphs.arrays import Sample

RANKINGS = "costmodel_rankings_total"
STORED = "costmodel_feedback_measurements_total"
BATCH = 16  # rank requests per round, 4 at a time, each on a new connection
ROUNDS = 12  # at most, until both workers have answered


@pytest.fixture
def workers(tmp_path: Path, model_dir: Path, redis_url: str) -> Iterator[ServiceServer]:
    tmp = tmp_path / "tmp"  # TMPDIR: where the command makes its metrics directory
    tmp.mkdir()
    env = {
        "TMPDIR": str(tmp),
        "COSTMODEL_DATA_DIR": str(tmp_path / "data"),
        "COSTMODEL_ADMIN_TOKEN": ADMIN,
    }
    costmodel = str(Path(sys.executable).with_name("costmodel"))
    argv = [
        costmodel,
        "serve",
        "--workers",
        "2",
        "--model-dir",
        str(model_dir),
        "--redis-url",
        redis_url,
    ]
    server = ServiceServer(tmp_path, env, argv=argv)
    server.start()
    # Ready means one worker is; the other may still be loading its models.
    deadline = time.monotonic() + 60
    while len(per_worker(server, RANKINGS)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    yield server
    server.stop()


def metrics_dir(server: ServiceServer) -> Path:
    found = list(Path(server.settings_env["TMPDIR"]).glob("costmodel-metrics-*"))
    assert len(found) == 1, found
    return found[0]


def per_worker(server: ServiceServer, name: str, **labels: str) -> dict[int, float]:
    """``name``'s value in each worker's own counter file, by PID."""
    out: dict[int, float] = {}
    for path in metrics_dir(server).glob("counter_*.db"):
        pid = int(path.stem.split("_")[1])
        out.setdefault(pid, 0.0)
        for family in MultiProcessCollector.merge([str(path)], accumulate=False):
            for sample in family.samples:
                if sample.name == name and labels.items() <= sample.labels.items():
                    out[pid] += sample.value
    return out


def last_stored(server: ServiceServer, n: int) -> np.ndarray:
    """The configs of the newest ``n`` stored measurements, oldest first."""
    url = default_sqlite_url(Path(server.settings_env["COSTMODEL_DATA_DIR"]))
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            query = sa.select(measurements).order_by(measurements.c.id.desc()).limit(n)
            found = [r._mapping for r in conn.execute(query)][::-1]
    finally:
        engine.dispose()
    return np.stack(
        [
            np.frombuffer(r["config"], r["config_dtype"]).reshape(
                tuple(int(x) for x in r["config_shape"].split(","))
            )
            for r in found
        ]
    )


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def total(server: ServiceServer, name: str, **labels: str) -> float:
    """The value /metrics shows (whichever worker answers the scrape)."""
    return metric(httpx.get(f"{server.url}/metrics").text, name, **labels)


def post(server: ServiceServer, path: str, body: dict[str, Any]) -> httpx.Response:
    """On a new connection each time, so the kernel may hand it to either worker."""
    return httpx.post(f"{server.url}{path}", json=body, timeout=30)


def rank_round(server: ServiceServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: post(server, "/v1/rank", body), range(BATCH)))
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers]
    return [r.json() for r in answers]


def until_both_answer(
    server: ServiceServer, body: dict[str, Any], **labels: str
) -> tuple[list[dict[str, Any]], dict[int, float]]:
    """Rank rounds until every worker has ``RANKINGS{labels}`` above its start."""
    start = per_worker(server, RANKINGS, **labels)
    answers: list[dict[str, Any]] = []
    for _ in range(ROUNDS):
        answers += rank_round(server, body)
        now = per_worker(server, RANKINGS, **labels)
        if all(now[pid] > start.get(pid, 0.0) for pid in now):
            break
    return answers, {pid: v - start.get(pid, 0.0) for pid, v in now.items()}


def test_two_workers_share_metrics_feedback_and_rankings_then_clean_up(
    workers: ServiceServer, kernel: Sample
) -> None:
    pids = set(per_worker(workers, RANKINGS))
    assert len(pids) == 2 and {parent_of(p) for p in pids} == {workers.proc.pid}  # type: ignore[union-attr]
    r = httpx.put(f"{workers.url}/v1/graphs?model=tile", json=graph_json(kernel))
    assert r.status_code == 200, r.text
    gid = r.json()["graph_id"]
    rest = kernel.configs[100:200]
    body = {"model": "tile", "graph_id": gid, "configs": rest.tolist()}

    # Both workers answer; /metrics counts every ranking, whoever served it.
    sent, served = until_both_answer(workers, body, adapted="false")
    assert set(served) == pids and min(served.values()) > 0, served
    assert total(workers, RANKINGS, model="tile", adapted="false") == len(sent)
    assert total(workers, RANKINGS, model="tile", adapted="true") == 0

    # Feedback through one worker adapts the rankings answered by both.
    fed = {
        "model": "tile",
        "graph_id": gid,
        "configs": kernel.configs[:8].tolist(),
        "runtimes_ns": [int(x) for x in kernel.runtimes[:8]],
    }
    r = post(workers, "/v1/feedback", fed)
    assert r.status_code == 200 and r.json()["stored"] == 8, r.text
    got_it = [pid for pid, n in per_worker(workers, STORED).items() if n == 8]
    assert len(got_it) == 1
    adapted, served = until_both_answer(workers, body, adapted="true")
    other = (pids - set(got_it)).pop()
    assert served[other] > 0, served
    assert {a["adapted"] for a in adapted} == {8}
    # Every worker's adapted scores are the same scores.
    assert len({tuple(a["scores"]) for a in adapted}) == 1
    assert total(workers, RANKINGS, model="tile", adapted="true") == len(adapted)
    assert total(workers, RANKINGS, model="tile", adapted="false") == len(sent)

    # A ranking answered by one worker is remembered by the other (Redis).
    latest = kernel.configs[300:310]
    before = per_worker(workers, RANKINGS)
    ranked = post(workers, "/v1/rank", {**body, "configs": latest.tolist()})
    assert ranked.status_code == 200, ranked.text
    ranker = [p for p, n in per_worker(workers, RANKINGS).items() if n > before[p]]
    assert len(ranker) == 1
    by_index = {
        "model": "tile",
        "graph_id": gid,
        "config_indices": [3, 0],
        "ranking_id": ranked.json()["ranking_id"],
        "runtimes_ns": [30, 10],
    }
    start = per_worker(workers, STORED)
    other = (pids - set(ranker)).pop()
    for _ in range(BATCH * ROUNDS):
        r = post(workers, "/v1/feedback", by_index)
        assert r.status_code == 200 and r.json()["stored"] == 2, r.text
        if per_worker(workers, STORED)[other] > start[other]:
            break
    else:
        pytest.fail("feedback never reached the worker that did not rank")
    # ... the configs of that ranking, wherever an older one was answered.
    assert np.array_equal(last_stored(workers, 2), latest[[3, 0]])

    # The command removes its metrics directory when it stops.
    path = metrics_dir(workers)
    workers.stop()
    assert not path.exists()


def test_options_travel_to_the_workers_as_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    overrides = {
        "port": 9000,
        "model_dir": tmp_path,
        "models": ["tile"],
        "redis_url": None,
        "workers": 3,
    }
    env = settings_env(overrides)
    assert env == {
        "COSTMODEL_PORT": "9000",
        "COSTMODEL_MODEL_DIR": str(tmp_path),
        "COSTMODEL_MODELS": "tile",
        "COSTMODEL_WORKERS": "3",
    }
    monkeypatch.setenv("COSTMODEL_PORT", "1")
    monkeypatch.delenv("COSTMODEL_WORKERS", raising=False)
    with patched_environ(env):
        settings = Settings()  # as a worker's app_from_env reads them
        server, scoring = settings.server, settings.scoring
        assert (server.port, scoring.models, server.workers) == (9000, ["tile"], 3)
        assert scoring.model_dir == tmp_path
    assert os.environ["COSTMODEL_PORT"] == "1" and "COSTMODEL_WORKERS" not in os.environ
