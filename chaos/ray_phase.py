"""The optional ``replica_killed`` phase (``costmodel chaos --ray``): the service as two
Ray Serve replicas (``xla_costmodel.service.ray_app``) sharing the run's Redis and
PostgreSQL, clients on Serve's proxy, and one replica actor killed under load.

Ray is started in this process (a local cluster, never one ``RAY_ADDRESS`` names) the
way ``tests/service/test_ray_replicas.py`` starts it, and shut down with everything it
started before the phase returns. Only this module imports ray, and only when asked.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from xla_costmodel.chaos.faults import Cluster
from xla_costmodel.chaos.load import Crew
from xla_costmodel.harness import LOOPBACK, free_port

REPLICAS = 2


@contextmanager
def serve_replicas(env: dict[str, str]) -> Iterator[str]:
    """Serve's proxy on a free loopback port, ``REPLICAS`` replicas behind it; yields
    its URL once every replica is up (``serve.run`` waits for them)."""
    import ray
    from ray import serve

    from xla_costmodel.service import ray_app

    # Read by the proxy when it starts (Ray's processes inherit this environment):
    # a request a dying replica held becomes a 502 the client retries.
    saved = os.environ.get(ray_app.PROXY_CALLBACK_ENV)
    os.environ[ray_app.PROXY_CALLBACK_ENV] = ray_app.PROXY_CALLBACK
    port = free_port()
    ray.init(
        address="local",
        num_cpus=REPLICAS,
        include_dashboard=False,
        log_to_driver=False,
    )
    try:
        serve.start(http_options={"host": LOOPBACK, "port": port})
        app = ray_app.build({"replicas": REPLICAS, "replica_cpus": 0.5, "env": env})
        serve.run(app, name=ray_app.DEPLOYMENT, route_prefix="/")
        yield f"http://{LOOPBACK}:{port}"
    finally:
        ray.shutdown()  # the local cluster, Serve and its replicas with it
        if saved is None:
            os.environ.pop(ray_app.PROXY_CALLBACK_ENV, None)
        else:
            os.environ[ray_app.PROXY_CALLBACK_ENV] = saved


def replica_names() -> list[tuple[str, str]]:
    import ray

    from xla_costmodel.service import ray_app

    prefix = f"SERVE_REPLICA::{ray_app.DEPLOYMENT}#"
    return [
        (a["name"], a["namespace"])
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith(prefix)
    ]


def kill_one_replica() -> str:
    """Kill a replica actor outright; Serve's controller starts a replacement."""
    import ray

    name, namespace = replica_names()[0]
    ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
    return name


def replica_killed(cluster: Cluster, seconds: float) -> dict[str, Any]:
    """Clients on the replicas for ``seconds``; one replica killed a quarter in."""
    env = {
        k: v
        for k, v in cluster.server.settings_env.items()
        if k.startswith("COSTMODEL_")
    }
    started = time.monotonic()
    with serve_replicas(env) as url:
        startup_s = time.monotonic() - started
        crew = Crew(url, cluster.workload, cluster.recorder, cluster.ledger)
        crew.start(cluster.clients)
        try:
            t0 = time.monotonic()
            time.sleep(seconds / 4)
            victim = kill_one_replica()
            time.sleep(max(0.0, t0 + seconds - time.monotonic()))
            replicas_after = len(replica_names())
        finally:
            crew.stop()
    return {
        "replicas": REPLICAS,
        "killed": victim,
        "replicas_at_end": replicas_after,
        "startup_s": round(startup_s, 1),
    }
