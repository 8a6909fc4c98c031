"""A writer the operator removes stops being served by ``GET /v1/best`` at once, on
every process: two real service processes (``costmodel serve``) sharing one
PostgreSQL and the session's redis-server, writers created, revoked and purged with
the real command line (docs/security.md, docs/reuse.md).

- ``costmodel measurements purge`` deletes the writer's decisions with its
  measurements (they were kept, and served as long as its name was not revoked);
- ``costmodel tokens revoke`` announces the change through Redis, as the purge does,
  so every process drops the decisions it cached instead of serving the revoked
  writer's for up to 60 s (the longest an entry is trusted with a live
  subscription).

Each process has read the graph's decisions (cached) before the operator acts; the
check polls for at most ``SOON_S``, far below the 60 s an unannounced entry lives.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from servicekit import ARTIFACTS, SERVE, metric, program
from typer.testing import CliRunner

from xla_costmodel.cli import build_app
from xla_costmodel.harness import PostgresServer, RedisServer, ServiceServer
from xla_costmodel.service.store.schema import decisions
from xla_costmodel.tpugraphs import xla_cpu2

ROWS = xla_cpu2.sample(8, seed=5)[1:].tolist()  # row 0 is the default
# Seals what the service keeps in Redis and the tools' announcements alike.
SEAL = {"COSTMODEL_REDIS_HMAC_KEY": "decisions-trust-seal"}
SOON_S = 5.0  # "at once": the announcement travels through pub/sub in ms
cli = CliRunner()


@dataclass
class Deployment:
    a: ServiceServer
    b: ServiceServer
    database: str
    redis: str
    tokens: dict[str, str]  # writer -> token


def costmodel(*argv: str, env: dict[str, str] | None = None) -> str:
    """The real command line, in process; its stdout."""
    result = cli.invoke(build_app(), list(argv), env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: PostgresServer,
    redis_server: RedisServer,
) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("decisions-trust")
    shutil.copytree(ARTIFACTS / "xla_cpu" / "1", root / "artifacts" / "xla_cpu" / "1")
    for server in (postgres_server, redis_server):
        if server.proc is None:
            server.start()
    name = postgres_server.create_database()
    database = postgres_server.database_url(name)
    tokens = {
        writer: costmodel(
            "tokens", "create", writer, "--database-url", database
        ).splitlines()[-1]
        for writer in ("keeper", "purged", "revoked")
    }
    env = {
        "COSTMODEL_MODEL_DIR": str(root / "artifacts"),
        "COSTMODEL_MODELS": "xla_cpu",
        "COSTMODEL_DATABASE_URL": database,
        "COSTMODEL_REDIS_URL": redis_server.url,
        "COSTMODEL_FEEDBACK_AUTH": "token",
        **SEAL,
        "COSTMODEL_REDIS_COOLDOWN_S": "0",
    }
    (root / "a").mkdir()
    (root / "b").mkdir()
    try:
        with (
            ServiceServer(root / "a", env, argv=SERVE) as a,
            ServiceServer(root / "b", env, argv=SERVE) as b,
        ):
            subscribed(a)
            subscribed(b)
            yield Deployment(a, b, database, redis_server.url, tokens)
    finally:
        postgres_server.drop_database(name)


def subscribed(server: ServiceServer) -> None:
    """Until the process hears invalidations (else it trusts entries briefly, and
    the tests would pass without being told anything)."""
    deadline = time.monotonic() + 30
    while not metric(
        httpx.get(server.url + "/metrics", timeout=10).text,
        "costmodel_generation_subscribed",
    ):
        assert time.monotonic() < deadline, "the invalidation subscription never came"
        time.sleep(0.05)


def gid(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def measure(d: Deployment, writer: str, name: str) -> str:
    """The writer's feedback of a fresh program (the graph inline): its graph id.
    A decision's pairs are measurements of a stored graph."""
    seed = int(gid(name)[:8], 16)
    r = httpx.post(
        d.a.url + "/v1/feedback",
        json={
            "model": "xla_cpu",
            "graph": program(seed),
            "configs": [xla_cpu2.default_row().tolist()],
            "runtimes_ns": [1000],
        },
        headers={"Authorization": f"Bearer {d.tokens[writer]}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return str(r.json()["graph_id"])


def decide(
    d: Deployment, writer: str, graph: str, config: list[Any], speedup_low: float
) -> None:
    body = {
        "model": "xla_cpu",
        "graph_id": graph,
        "config": config,
        "paired_runtimes_ns": [
            [round(1000 * speedup_low * (1 + 0.01 * i)), 1000] for i in range(8)
        ],
        "budget": 32,
        "strategy": "model",
        "kept_default": False,
    }
    r = httpx.post(
        d.a.url + "/v1/decisions",
        json=body,
        headers={"Authorization": f"Bearer {d.tokens[writer]}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text


def best(server: ServiceServer, graph: str) -> httpx.Response:
    params = {"model": "xla_cpu", "graph_id": graph}
    return httpx.get(server.url + "/v1/best", params=params, timeout=30)


def served(server: ServiceServer, graph: str) -> list[Any] | str:
    """The config answered for ``graph``, or the error code."""
    r = best(server, graph)
    if r.status_code == 200:
        return list(r.json()["config"])
    return str(r.json()["error"]["code"])


def soon(check: Callable[[], bool]) -> None:
    """Until ``check()`` holds, polled for at most ``SOON_S`` (no waiting for an
    entry to expire: that takes 60 s)."""
    start = time.monotonic()
    while not check():
        elapsed = time.monotonic() - start
        assert elapsed < SOON_S, f"still served after {elapsed:.1f} s"
        time.sleep(0.01)


def writers_of(database: str, graph: str) -> list[str | None]:
    engine = sa.create_engine(
        database.replace("postgresql://", "postgresql+psycopg://")
    )
    try:
        with engine.connect() as conn:
            query = sa.select(decisions.c.writer).where(decisions.c.graph_id == graph)
            return sorted(conn.execute(query).scalars(), key=str)
    finally:
        engine.dispose()


def test_a_purged_writers_decisions_leave_the_database_and_every_answer(
    deployment: Deployment,
) -> None:
    d = deployment
    shared = measure(d, "keeper", "purge-shared")
    alone = measure(d, "keeper", "purge-alone")
    decide(d, "keeper", shared, ROWS[0], speedup_low=1.05)
    decide(d, "purged", shared, ROWS[1], speedup_low=1.5)  # the better claim
    decide(d, "purged", alone, ROWS[2], speedup_low=1.2)
    for server in (d.a, d.b):  # each process caches both graphs' decisions
        assert served(server, shared) == ROWS[1]
        assert served(server, alone) == ROWS[2]

    out = costmodel(
        "measurements",
        "purge",
        "--writer",
        "purged",
        "--database-url",
        d.database,
        "--redis-url",
        d.redis,
        env=SEAL,
    )
    assert out.splitlines()[-1] == str(2 * 8 * 2)  # its decisions' pairs
    assert writers_of(d.database, shared) == ["keeper"]
    assert writers_of(d.database, alone) == []
    soon(lambda: [served(s, shared) for s in (d.a, d.b)] == [ROWS[0]] * 2)
    assert [served(s, alone) for s in (d.a, d.b)] == ["no_decision"] * 2


def test_a_revoked_writers_decisions_leave_every_process_at_once(
    deployment: Deployment,
) -> None:
    d = deployment
    graph = measure(d, "keeper", "revoke")
    decide(d, "keeper", graph, ROWS[3], speedup_low=1.05)
    decide(d, "revoked", graph, ROWS[4], speedup_low=1.5)
    assert served(d.a, graph) == ROWS[4]
    assert served(d.b, graph) == ROWS[4]  # b caches it, trusted for 60 s

    # As in a pod: the service's Redis URL and seal key are in the environment.
    costmodel(
        "tokens",
        "revoke",
        "revoked",
        "--database-url",
        d.database,
        env={"COSTMODEL_REDIS_URL": d.redis, **SEAL},
    )
    soon(lambda: [served(s, graph) for s in (d.b, d.a)] == [ROWS[3]] * 2)
    # Hidden, not deleted: its rows stay until a purge (as its measurements do).
    assert writers_of(d.database, graph) == ["keeper", "revoked"]
