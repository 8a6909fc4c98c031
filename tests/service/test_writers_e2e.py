"""Who may write measurements, through a real uvicorn server on real SQLite and
PostgreSQL (and the session's redis-server): the auth matrix, one writer's flood,
purge, quotas, ranking ids under a race, slow bodies, oversized HLO text.

Writers are created with the real command line (``costmodel tokens create``) on the
server's database; the server runs with ``COSTMODEL_FEEDBACK_AUTH=token``.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import sqlalchemy as sa
from servicekit import ARTIFACTS, SERVE, TILE, metric
from typer.testing import CliRunner

from xla_costmodel.cli import build_app
from xla_costmodel.harness import ServiceServer, free_port
from xla_costmodel.service.store.schema import measurements
from xla_costmodel.tpugraphs.arrays import Sample
from xla_costmodel.tpugraphs.reader import load_npz

OTHER_TILE = TILE.replace("fusion.191_4ae805e53b8d2b8a", "fusion.205_11d55dfd21d1a19c")
QUOTA = 5000
BODY_TIMEOUT_S = 2
# Seals what the service keeps in Redis; required with tokens, Redis and a database
# URL without a password. The purge's announcement is sealed with it too.
SEAL = {"COSTMODEL_REDIS_HMAC_KEY": "writers-e2e-seal"}
cli = CliRunner()


@dataclass
class Served:
    url: str  # the service
    database: str  # its database
    redis: str  # its Redis (the purge tells every process through it)
    tokens: dict[str, str]  # writer -> token
    process: ServiceServer

    def client(self, writer: str | None = None, **kw: Any) -> httpx.Client:
        headers = (
            {} if writer is None else {"Authorization": f"Bearer {self.tokens[writer]}"}
        )
        return httpx.Client(base_url=self.url, headers=headers, timeout=60, **kw)


def costmodel(*argv: str, env: dict[str, str] | None = None) -> str:
    """The real command line, in process; its stdout (stderr must not hold it)."""
    result = cli.invoke(build_app(), list(argv), env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("writers")
    shutil.copytree(ARTIFACTS / "tile" / "1", root / "artifacts" / "tile" / "1")
    drop = None
    if request.param == "sqlite":
        database = f"sqlite:///{root / 'costmodel.db'}"
    else:
        pg = request.getfixturevalue("postgres_server")
        if pg.proc is None:
            pg.start()
        drop = pg.create_database()
        database = pg.database_url(drop)
    tokens = {}
    for name, targets in (
        ("honest", ["tpu-v3"]),
        ("flood", []),
        ("elsewhere", ["cpu"]),
        ("gone", []),
        ("second", []),
    ):
        argv = ["tokens", "create", name, "--database-url", database]
        for target in targets:
            argv += ["--target", target]
        tokens[name] = costmodel(*argv).splitlines()[-1]
    costmodel("tokens", "revoke", "gone", "--database-url", database)
    redis = request.getfixturevalue("redis_server")
    if redis.proc is None:
        redis.start()
    env = {
        "COSTMODEL_MODEL_DIR": str(root / "artifacts"),
        "COSTMODEL_MODELS": "tile",
        "COSTMODEL_DATABASE_URL": database,
        "COSTMODEL_REDIS_URL": redis.url,
        "COSTMODEL_FEEDBACK_AUTH": "token",
        **SEAL,
        "COSTMODEL_FEEDBACK_QUOTA_ROWS": str(QUOTA),
        "COSTMODEL_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "COSTMODEL_MAX_INFLIGHT": "4",
        "COSTMODEL_MAX_HLO_INSTRUCTIONS": "50",
        "COSTMODEL_MAX_HLO_BYTES": "65536",
    }
    process = ServiceServer(root, env, argv=SERVE)
    process.start()
    try:
        yield Served(process.url, database, redis.url, tokens, process)
    finally:
        process.stop()
        if drop is not None:
            request.getfixturevalue("postgres_server").drop_database(drop)


@pytest.fixture(scope="module")
def other_kernel(shared_data: Path) -> Sample:
    return load_npz(shared_data / OTHER_TILE)


def stored(database: str) -> list[dict[str, Any]]:
    engine = sa.create_engine(
        database.replace("postgresql://", "postgresql+psycopg://")
    )
    try:
        with engine.connect() as conn:
            found = conn.execute(sa.select(measurements).order_by(measurements.c.id))
            return [dict(r._mapping) for r in found]
    finally:
        engine.dispose()


def upload(client: httpx.Client, sample: Sample) -> str:
    g = sample.graph
    body = {
        "node_feat": g.node_feat.tolist(),
        "node_opcode": g.node_opcode.tolist(),
        "edge_index": g.edge_index.tolist(),
    }
    r = client.put("/v1/graphs", params={"model": "tile"}, json=body)
    assert r.status_code == 200, r.text
    return str(r.json()["graph_id"])


def rank(client: httpx.Client, gid: str, configs: np.ndarray) -> dict[str, Any]:
    body = {"model": "tile", "graph_id": gid, "configs": configs.tolist()}
    r = client.post("/v1/rank", json=body)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def feedback(
    client: httpx.Client,
    gid: str,
    configs: np.ndarray,
    runtimes: Any,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> httpx.Response:
    body = {
        "model": "tile",
        "graph_id": gid,
        "configs": configs.tolist(),
        "runtimes_ns": [int(x) for x in runtimes],
        **extra,
    }
    return client.post("/v1/feedback", json=body, headers=headers)


def test_the_auth_matrix(served: Served, kernel: Sample) -> None:
    with served.client() as anonymous:
        gid = upload(anonymous, kernel)  # ranking needs no token
        configs, runtimes = kernel.configs[:2], kernel.runtimes[:2]
        r = feedback(anonymous, gid, configs, runtimes)
        assert (r.status_code, r.json()["error"]["code"]) == (401, "unauthorized")
        assert r.headers["www-authenticate"] == "Bearer"
        for token in ("cmw_unknown", served.tokens["gone"]):
            headers = {"Authorization": f"Bearer {token}"}
            r = anonymous.post(
                "/v1/feedback",
                headers=headers,
                json={
                    "model": "tile",
                    "graph_id": gid,
                    "configs": configs.tolist(),
                    "runtimes_ns": [int(x) for x in runtimes],
                },
            )
            assert (r.status_code, r.json()["error"]["code"]) == (401, "unauthorized")
    with served.client("elsewhere") as elsewhere:
        r = feedback(elsewhere, gid, configs, runtimes)  # the model's target: tpu-v3
        error = r.json()["error"]
        assert (r.status_code, error["code"], error["field"]) == (
            403,
            "forbidden",
            "target",
        )
        assert (
            feedback(elsewhere, gid, configs, runtimes, target="cpu").status_code == 200
        )
    with served.client("honest") as honest:
        r = feedback(honest, gid, configs, runtimes, target="cpu")
        assert (r.status_code, r.json()["error"]["field"]) == (403, "target")
        r = feedback(honest, gid, configs, runtimes)
        assert r.status_code == 200 and r.json()["target"] == "tpu-v3", r.text
    rows = stored(served.database)
    assert [(x["writer"], x["target"]) for x in rows] == [("elsewhere", "cpu")] * 2 + [
        ("honest", "tpu-v3")
    ] * 2
    listed = costmodel("tokens", "list", "--database-url", served.database)
    assert "honest" in listed and not any(t in listed for t in served.tokens.values())


def test_two_tuners_ranking_one_graph_each_store_their_own_batch(
    served: Served, kernel: Sample
) -> None:
    with served.client("second") as setup:
        gid = upload(setup, kernel)
    batches = {"a": kernel.configs[100:120], "b": kernel.configs[300:320]}
    start = threading.Barrier(2)
    failures: list[str] = []

    def tuner(name: str) -> None:
        with served.client("second") as client:
            start.wait()
            answer = rank(client, gid, batches[name])
            start.wait()  # both have ranked the graph before either reports
            body = {
                "model": "tile",
                "graph_id": gid,
                "config_indices": [0, 1, 2],
                "ranking_id": answer["ranking_id"],
                "runtimes_ns": [7, 8, 9],
            }
            r = client.post("/v1/feedback", json=body, headers={"X-Request-ID": name})
            if r.status_code != 200:
                failures.append(r.text)

    threads = [threading.Thread(target=tuner, args=(n,)) for n in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    for name, configs in batches.items():
        mine = [x for x in stored(served.database) if x["request_id"] == name]
        got = np.stack([np.frombuffer(x["config"], x["config_dtype"]) for x in mine])
        assert np.array_equal(got, configs[:3]), name


def test_one_writers_flood_moves_no_other_graph_and_cannot_silence_the_others(
    served: Served, kernel: Sample, other_kernel: Sample
) -> None:
    honest, flood = served.client("honest"), served.client("flood")
    flooded, other = upload(honest, kernel), upload(honest, other_kernel)
    picks = np.arange(0, len(kernel.configs), len(kernel.configs) // 12)[:12]
    r = feedback(honest, flooded, kernel.configs[picks], kernel.runtimes[picks])
    assert r.status_code == 200, r.text
    elsewhere = np.arange(8) * 2
    r = feedback(
        honest, other, other_kernel.configs[elsewhere], other_kernel.runtimes[elsewhere]
    )
    assert r.status_code == 200, r.text
    before = rank(honest, other, other_kernel.configs)
    assert before["adapted"] == 8

    # 4,000 outliers: the honest measurements inverted and blown up 1,000x.
    rng = np.random.default_rng(0)
    rows = rng.integers(0, len(kernel.configs), 4000)
    lies = 10**18 // kernel.runtimes[rows] * rng.integers(1, 1000, 4000)
    r = feedback(flood, flooded, kernel.configs[rows], lies)
    assert r.status_code == 200, r.text

    after = rank(honest, other, other_kernel.configs)
    assert (after["scores"], after["ranking"]) == (before["scores"], before["ranking"])
    shared = rank(honest, flooded, kernel.configs)
    # Past the quota: 429 with Retry-After; the honest writer is not throttled.
    r = feedback(
        flood,
        flooded,
        kernel.configs[rows[: QUOTA - 4000 + 1]],
        lies[: QUOTA - 4000 + 1],
    )
    assert (r.status_code, r.json()["error"]["code"]) == (429, "quota_exceeded")
    assert int(r.headers["retry-after"]) >= 1
    assert (
        feedback(honest, flooded, kernel.configs[:1], kernel.runtimes[:1]).status_code
        == 200
    )

    mine = [x for x in stored(served.database) if x["writer"] == "honest"]
    deleted = costmodel(
        "measurements",
        "purge",
        "--writer",
        "honest",
        "--database-url",
        served.database,
        "--redis-url",
        served.redis,
        env=SEAL,
    )
    assert int(deleted.splitlines()[-1]) == len(mine) >= 12 + 8 + 1
    assert {x["writer"] for x in stored(served.database)} >= {"flood"}
    assert "honest" not in {x["writer"] for x in stored(served.database)}
    # The honest rows still shaped the flooded graph's ranking: without them (purged,
    # and every process told through Redis) it is the flood's alone.
    flood_only = rank(honest, flooded, kernel.configs)
    for _ in range(50):  # the announcement travels through pub/sub: ms, not s
        if flood_only["scores"] != shared["scores"]:
            break
        time.sleep(0.01)
        flood_only = rank(honest, flooded, kernel.configs)
    assert shared["scores"] != flood_only["scores"]
    best = int(picks[np.argmin(kernel.runtimes[picks])])
    position = {
        k: v["ranking"].index(best)
        for k, v in (("shared", shared), ("flood", flood_only))
    }
    assert position["shared"] < position["flood"], position
    honest.close()
    flood.close()


def test_export_by_writer(served: Served, kernel: Sample, tmp_path: Path) -> None:
    with served.client("second") as client:
        gid = upload(client, kernel)
        r = feedback(client, gid, kernel.configs[:5], kernel.runtimes[:5], target="v-x")
        assert r.status_code == 200, r.text
    costmodel(
        "dataset",
        "export",
        "--out",
        str(tmp_path),
        "--writer",
        "second",
        "--target",
        "v-x",
        "--database-url",
        served.database,
    )
    (written,) = (tmp_path / "tile" / "v-x").iterdir()
    with np.load(written, allow_pickle=False) as data:
        assert data["config_feat"].shape == (5, 24)
    costmodel(
        "dataset",
        "export",
        "--out",
        str(tmp_path / "none"),
        "--writer",
        "nobody",
        "--database-url",
        served.database,
    )
    assert not (tmp_path / "none").exists()


def slow_upload(port: int) -> socket.socket:
    """A rank request whose body never finishes."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(
        b"POST /v1/rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
        b'\r\nContent-Length: 1000\r\n\r\n{"model"'
    )
    return s


def test_slow_bodies_cannot_starve_other_requests(
    served: Served, kernel: Sample
) -> None:
    with served.client() as client:
        gid = upload(client, kernel)
        counted = metric(client.get("/metrics").text, "costmodel_body_timeouts_total")
        slow = [slow_upload(served.process.port) for _ in range(6)]  # > max in flight
        try:
            started = time.monotonic()
            for _ in range(3):  # while 6 bodies trickle, ranking goes on
                rank(client, gid, kernel.configs[:10])
            assert time.monotonic() - started < BODY_TIMEOUT_S
            for s in slow:
                s.settimeout(BODY_TIMEOUT_S * 5)
                answer = b"".join(iter(lambda s=s: s.recv(4096), b""))  # to close
                assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
                assert b"request_timeout" in answer
        finally:
            for s in slow:
                s.close()
        text = client.get("/metrics").text
    assert metric(text, "costmodel_body_timeouts_total") == counted + 6


def test_oversized_hlo_is_refused_before_featurizing(served: Served) -> None:
    lines = [f"  p{i} = f32[2]{{0}} parameter({i})" for i in range(60)]
    # Junk after the instructions: parsing would fail on it, counting does not.
    text = "HloModule m\n\nENTRY e {\n" + "\n".join(lines) + "\n  %%% not HLO\n}\n"
    hlo = {"content-type": "text/x-hlo"}
    with served.client() as client:
        r = client.put("/v1/graphs?model=tile", content=text, headers=hlo)
        error = r.json()["error"]
        assert (r.status_code, error["field"]) == (422, "body"), r.text
        assert "60 instructions" in error["message"]
        r = client.put("/v1/graphs?model=tile", content="x" * 70_000, headers=hlo)
        error = r.json()["error"]
        assert (r.status_code, error["code"]) == (413, "payload_too_large"), r.text


def test_auto_stays_open_on_loopback(
    service_process: ServiceServer, kernel: Sample
) -> None:
    """The default (auto) on 127.0.0.1: no token needed, a wrong one still refused."""
    with httpx.Client(base_url=service_process.url, timeout=60) as client:
        gid = upload(client, kernel)
        r = feedback(client, gid, kernel.configs[:2], kernel.runtimes[:2])
        assert r.status_code == 200, r.text
        r = client.post(
            "/v1/feedback",
            headers={"Authorization": "Bearer cmw_nobody"},
            json={
                "model": "tile",
                "graph_id": gid,
                "runtimes_ns": [1],
                "configs": kernel.configs[:1].tolist(),
            },
        )
        assert (r.status_code, r.json()["error"]["code"]) == (401, "unauthorized")


def test_secrets_stay_out_of_answers_and_logs(
    tmp_path: Path, model_dir: Path, kernel: Sample
) -> None:
    password, admin = "hunter2-secret", "adm1n-secret"
    env = {
        "COSTMODEL_MODEL_DIR": str(model_dir),
        "COSTMODEL_MODELS": "tile",
        "COSTMODEL_DATABASE_URL": f"postgres://writer:{password}@127.0.0.1:{free_port()}/x",
        "COSTMODEL_ADMIN_TOKEN": admin,
        "COSTMODEL_FEEDBACK_AUTH": "token",
        "COSTMODEL_LOG_LEVEL": "DEBUG",
    }
    process = ServiceServer(tmp_path, env, argv=SERVE)
    process.start()
    try:
        with httpx.Client(base_url=process.url, timeout=60) as client:
            gid = upload(client, kernel)  # ranking goes on without the database
            answers = [
                feedback(
                    client,
                    gid,
                    kernel.configs[:1],
                    [5],
                    headers={"Authorization": "Bearer cmw_x"},
                ),
                client.post(
                    "/v1/models/tile/reload", headers={"Authorization": "Bearer wrong"}
                ),
                client.get("/metrics"),
            ]
            assert answers[0].status_code == 503, answers[0].text
            assert answers[0].json()["error"]["code"] == "feedback_unavailable"
            assert answers[1].status_code == 403
    finally:
        process.stop()
    log = process.log_path.read_text()
    assert "database unavailable" in log  # the operator hears about it ...
    for text in [log, *(a.text for a in answers)]:
        assert password not in text and admin not in text  # ... never its secrets
    refused = cli.invoke(
        build_app(),
        ["tokens", "list", "--database-url", f"mysql://writer:{password}@db/x"],
    )
    assert refused.exit_code == 2 and password not in refused.output
