"""Replicas on Ray Serve: a real local Ray, two replicas of the app behind Serve's
proxy, sharing the session's real redis-server and PostgreSQL.

Requests go through the proxy, which picks the replica; the ``X-Replica`` header of
each answer says which one it was, so the tests send until the replica they need
answers. The tests share one cluster (it takes most of the module's time) and run
in file order; the one that kills a replica comes last.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import numpy as np
import psycopg
import pytest
import ray
import yaml
from ray import serve
from servicekit import ARTIFACTS, REPO, graph_json
from starlette.responses import PlainTextResponse

from xla_costmodel.clients import CostModelClient, RetryPolicy
from xla_costmodel.harness import free_port
from xla_costmodel.service import ray_app
from xla_costmodel.tpugraphs.arrays import Sample

pytestmark = pytest.mark.ray
TRIES = 60  # requests sent to reach a given replica (the proxy picks at random)


@dataclass
class Cluster:
    url: str
    database_url: str

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=30)

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        r = httpx.post(self.url + path, json=body, timeout=30)
        assert r.status_code == 200, r.text
        return r

    def until(
        self, send: Callable[[], httpx.Response], want: Callable[[str], bool]
    ) -> httpx.Response:
        """Send until a replica ``want`` accepts answers."""
        for _ in range(TRIES):
            r = send()
            if want(r.headers["x-replica"]):
                return r
        pytest.fail(f"no wanted replica answered in {TRIES} requests")

    def replica_actors(self) -> list[dict[str, str]]:
        return [
            a
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith("SERVE_REPLICA::costmodel#costmodel#")
        ]


@pytest.fixture(scope="module")
def cluster(
    redis_server: Any, postgres_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    if redis_server.proc is None:
        redis_server.start()
    redis_server.flushall()
    database = postgres_server.create_database()
    env = {
        "COSTMODEL_MODEL_DIR": str(ARTIFACTS),
        "COSTMODEL_DATA_DIR": str(tmp_path_factory.mktemp("ray-data")),
        "COSTMODEL_REDIS_URL": redis_server.url,
        "COSTMODEL_DATABASE_URL": postgres_server.database_url(database),
        "COSTMODEL_INFERENCE_WORKERS": "1",
        "COSTMODEL_MODELS": "tile",  # all these tests need: replicas start sooner
        # Serve's proxy holds the listening socket, so a replica cannot tell what it
        # is bound to and ``auto`` requires tokens (core/binding.py): these tests are
        # about replicas, not writers, so say it outright.
        "COSTMODEL_FEEDBACK_AUTH": "off",
    }
    # The proxy reads it when it starts; Ray's processes inherit this environment
    # (and this process's CPU affinity).
    saved = os.environ.get(ray_app.PROXY_CALLBACK_ENV)
    os.environ[ray_app.PROXY_CALLBACK_ENV] = ray_app.PROXY_CALLBACK
    port = free_port()
    ray.init(
        address="local",  # never a cluster that RAY_ADDRESS may name
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
    )
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        app = ray_app.build({"replicas": 2, "replica_cpus": 0.5, "env": env})
        serve.run(app, name=ray_app.DEPLOYMENT, route_prefix="/")
        yield Cluster(
            f"http://127.0.0.1:{port}", postgres_server.database_url(database)
        )
    finally:
        ray.shutdown()  # stops the local cluster, Serve and its replicas with it
        if saved is None:
            os.environ.pop(ray_app.PROXY_CALLBACK_ENV, None)
        else:
            os.environ[ray_app.PROXY_CALLBACK_ENV] = saved
        postgres_server.drop_database(database)


def rank_body(kernel: Sample, gid: str | None, rows: np.ndarray) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "tile", "configs": kernel.configs[rows].tolist()}
    if gid is None:
        body["graph"] = graph_json(kernel)
    else:
        body["graph_id"] = gid
    return body


def test_both_replicas_answer_and_name_themselves(cluster: Cluster) -> None:
    tags = {a["name"].rsplit("#", 1)[1] for a in cluster.replica_actors()}
    assert len(tags) == 2
    seen: set[str] = set()
    for _ in range(TRIES):
        r = cluster.get("/readyz")
        assert r.status_code == 200 and r.json()["ready"] is True
        seen.add(r.headers["x-replica"])
        if seen == tags:
            break
    assert seen == tags  # both replicas ran their lifespan: models loaded, warmed


def test_an_embedding_computed_by_one_replica_is_a_redis_hit_in_the_other(
    cluster: Cluster, kernel: Sample
) -> None:
    rows = np.arange(40)
    cold = cluster.post("/v1/rank", rank_body(kernel, None, rows))
    assert cold.json()["cache"] == "miss"
    first, gid = cold.headers["x-replica"], cold.json()["graph_id"]

    def by_id() -> httpx.Response:
        return cluster.post("/v1/rank", rank_body(kernel, gid, rows))

    other = cluster.until(by_id, lambda tag: tag != first)
    assert other.json()["cache"] == "redis"  # not "miss": nothing was recomputed
    assert other.json()["ranking"] == cold.json()["ranking"]
    same = cluster.until(by_id, lambda tag: tag == first)
    assert same.json()["cache"] == "memory"


def test_feedback_through_one_replica_adapts_rankings_in_the_other(
    cluster: Cluster, kernel: Sample
) -> None:
    fed, probe = np.arange(100, 108), np.arange(200, 260)
    cold = cluster.post("/v1/rank", rank_body(kernel, None, probe))
    gid = cold.json()["graph_id"]

    def rank() -> httpx.Response:
        return cluster.post("/v1/rank", rank_body(kernel, gid, probe))

    replicas = {a["name"].rsplit("#", 1)[1] for a in cluster.replica_actors()}
    for tag in replicas:  # each answers once before the feedback: the prior alone
        assert cluster.until(rank, lambda t, tag=tag: t == tag).json()["adapted"] == 0
    body = {
        "model": "tile",
        "graph_id": gid,
        "configs": kernel.configs[fed].tolist(),
        "runtimes_ns": [int(x) for x in kernel.runtimes[fed]],
    }
    stored = cluster.post("/v1/feedback", body)
    assert stored.json()["stored"] == len(fed)
    other = cluster.until(rank, lambda t: t != stored.headers["x-replica"])
    distinct = len(np.unique(kernel.configs[fed], axis=0))
    assert distinct >= 4  # adaptation starts at blend.MIN_MEASUREMENTS
    assert other.json()["adapted"] == distinct
    assert other.json()["scores"] != cold.json()["scores"]


def measurement_rows(database_url: str, gid: str) -> int:
    with psycopg.connect(database_url, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT count(*) FROM measurements WHERE graph_id = %s", (gid,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_killing_a_replica_under_load_loses_no_feedback_and_fails_no_request(
    cluster: Cluster, kernel: Sample
) -> None:
    """Four threads rank and report through the project's client while one replica
    actor is killed (``ray.kill``, no restart): requests it held answer 502 at the
    proxy, and the client resends them, feedback under its Idempotency-Key."""
    retry = RetryPolicy(max_attempts=8, backoff_max=0.5)
    acknowledged, requests, errors = [0] * 4, [0] * 4, []
    stop, killed = threading.Event(), threading.Event()
    after_kill = [0] * 4

    def load(worker: int) -> None:
        rng = np.random.default_rng(worker)
        with CostModelClient(cluster.url, retry=retry, default_deadline=60) as client:
            try:
                while not stop.is_set():
                    rows = rng.choice(kernel.num_configs, 16, replace=False)
                    result = client.rank("tile", kernel.graph, kernel.configs[rows])
                    best = rows[list(result.top_k[:2])]
                    fed = client.feedback(
                        "tile",
                        kernel.graph,
                        kernel.runtimes[best],
                        configs=kernel.configs[best],
                    )
                    acknowledged[worker] += fed.stored
                    requests[worker] += 2
                    after_kill[worker] += 2 if killed.is_set() else 0
            except Exception as exc:  # any failure fails the test, below
                errors.append(exc)

    seeded = cluster.post("/v1/rank", rank_body(kernel, None, np.arange(4)))
    gid = seeded.json()["graph_id"]
    before = measurement_rows(cluster.database_url, gid)
    threads = [threading.Thread(target=load, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: sum(requests) >= 40 or bool(errors))
        victim = cluster.replica_actors()[0]
        ray.kill(
            ray.get_actor(victim["name"], namespace=victim["namespace"]),
            no_restart=True,
        )
        killed.set()
        wait_for(lambda: sum(after_kill) >= 40 or bool(errors))
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert not errors, errors
    assert sum(after_kill) >= 40  # the load went on through the surviving replica
    stored = measurement_rows(cluster.database_url, gid) - before
    assert stored == sum(acknowledged)  # none lost, none stored twice
    # Serve's controller notices the death and starts a replacement.
    names = lambda: {a["name"] for a in cluster.replica_actors()}  # noqa: E731
    wait_for(lambda: len(names()) == 2 and victim["name"] not in names())


def wait_for(done: Callable[[], bool], limit: float = 60) -> None:
    """Poll ``done`` until true; fail after ``limit`` seconds (a hang, not a speed
    check: the figures the test needs come in seconds)."""
    deadline = time.monotonic() + limit
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {limit}s")
        time.sleep(0.1)


# The proxy middleware and the Serve config, without a cluster.


def test_a_request_no_replica_answered_gets_502_and_answers_pass() -> None:
    """What the proxy does for a request whose replica died: send nothing (its
    uvicorn would answer a bare 500), or fail."""

    async def nothing(scope: Any, receive: Any, send: Any) -> None:
        return None

    async def raises(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("actor died")

    async def answers_500(scope: Any, receive: Any, send: Any) -> None:
        await PlainTextResponse("bug", 500)(scope, receive, send)

    async def get(app: Any) -> tuple[int, str]:
        (middleware,) = ray_app.proxy_middlewares()
        wrapped = middleware.cls(app, *middleware.args, **middleware.kwargs)
        transport = httpx.ASGITransport(wrapped)
        async with httpx.AsyncClient(transport=transport, base_url="http://p") as c:
            r = await c.get("/v1/models")
            return r.status_code, r.text

    for app in (nothing, raises):
        status, text = anyio.run(get, app)
        assert status == 502 and '"code":"bad_gateway"' in text.replace(" ", "")
    assert anyio.run(get, answers_500) == (500, "bug")  # an answer is left alone


def test_the_serve_config_validates_and_builds() -> None:
    from ray.serve.schema import ServeDeploySchema

    config = yaml.safe_load((REPO / "deploy" / "ray" / "serve.yaml").read_text())
    schema = ServeDeploySchema.model_validate(config)
    (application,) = schema.applications
    module, _, name = application.import_path.partition(":")
    assert (module, name) == ("xla_costmodel.service.ray_app", "build")
    app = ray_app.build(application.args)
    assert isinstance(app, serve.Application)
    with pytest.raises(ValueError, match="min_replicas"):
        ray_app.build({"replicas": 5, "min_replicas": 1, "max_replicas": 4})
    with pytest.raises(ValueError, match="COSTMODEL_"):
        ray_app.build({"env": {"REDIS_URL": "redis://x"}})
    with pytest.raises(ValueError, match="redis_url"):
        ray_app.build({"env": {"COSTMODEL_REDIS_URL": "http://x"}})
