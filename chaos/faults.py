"""The faults of a chaos run, and the processes they are done to.

Each fault is a function ``(cluster, seconds) -> dict`` that runs for about ``seconds``
while the clients keep going, always undoes what it did (a paused Redis is resumed, a
stopped server restarted) even when it fails, and returns what happened for the report.
A fault starts a quarter into its phase, so every phase also shows the service before
it, and leaves the last quarter for recovery.

The processes are ``xla_costmodel.harness``'s, which restart on the same port (clients
and the service keep their URLs); the service is started as ``costmodel serve``, the
command a user runs.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from xla_costmodel.chaos.load import Crew, Ledger, Recorder, Workload
from xla_costmodel.harness import (
    ManagedProcess,
    PostgresServer,
    RedisServer,
    ServiceServer,
    add_version,
)

ADMIN_TOKEN = "chaos-admin-token"  # loopback only; the run's own throwaway server


def respawn(process: ManagedProcess) -> float:
    """Start a stopped process again on its port; seconds until it answered."""
    t0 = time.monotonic()
    process.start()  # same port: the service reconnects to the same URL
    return time.monotonic() - t0


def costmodel_serve(workdir: Path, settings_env: dict[str, str]) -> ServiceServer:
    """``costmodel serve`` (the console script's entry point) as a subprocess; settings
    come from the ``COSTMODEL_*`` environment, host and port from its options."""
    entry = "from xla_costmodel.cli import main; main()"
    return ServiceServer(
        workdir, settings_env, argv=[sys.executable, "-c", entry, "serve"]
    )


@dataclass
class Cluster:
    """Everything a fault may act on."""

    redis: RedisServer
    postgres: PostgresServer
    server: ServiceServer
    model_dir: Path
    model: str
    clients: int
    workload: Workload
    recorder: Recorder
    ledger: Ledger

    def crew(self) -> Crew:
        """Client threads over the run's workload, counted in the run's figures."""
        return Crew(self.server.url, self.workload, self.recorder, self.ledger)


def _sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.monotonic()))


def baseline(cluster: Cluster, seconds: float) -> dict[str, Any]:
    time.sleep(seconds)
    return {}


def redis_paused(cluster: Cluster, seconds: float) -> dict[str, Any]:
    """SIGSTOP: Redis holds every connection open and answers nothing (a hung cache)."""
    t0 = time.monotonic()
    time.sleep(seconds / 4)
    os.kill(cluster.redis.pid, signal.SIGSTOP)
    try:
        time.sleep(seconds / 2)
    finally:
        os.kill(cluster.redis.pid, signal.SIGCONT)
    _sleep_until(t0 + seconds)
    return {"paused_s": round(seconds / 2, 2)}


def redis_restarted(cluster: Cluster, seconds: float) -> dict[str, Any]:
    """SIGKILL, then a fresh, empty redis-server on the same port."""
    t0 = time.monotonic()
    time.sleep(seconds / 4)
    cluster.redis.kill()
    try:
        time.sleep(seconds / 4)
    finally:
        restart_s = respawn(cluster.redis)
    _sleep_until(t0 + seconds)
    return {"down_s": round(seconds / 4 + restart_s, 2)}


def postgres_restarted(cluster: Cluster, seconds: float) -> dict[str, Any]:
    """Fast shutdown of the measurement database, then the same cluster again."""
    t0 = time.monotonic()
    time.sleep(seconds / 4)
    down = time.monotonic()
    cluster.postgres.shutdown()
    try:
        time.sleep(seconds / 4)
    finally:
        respawn(cluster.postgres)
    down_s = time.monotonic() - down
    _sleep_until(t0 + seconds)
    return {"down_s": round(down_s, 2)}


def model_reloaded(cluster: Cluster, seconds: float) -> dict[str, Any]:
    """A good new version is reloaded (and must serve), then a corrupt one (it must be
    refused, and the good one keep serving)."""
    t0 = time.monotonic()
    versions = sorted(
        (
            int(p.name)
            for p in (cluster.model_dir / cluster.model).iterdir()
            if p.name.isdigit()
        ),
    )
    good, corrupt = str(versions[-1] + 1), str(versions[-1] + 2)
    time.sleep(seconds / 4)
    add_version(cluster.model_dir, cluster.model, good, source=str(versions[-1]))
    good_answer = reload(cluster)
    time.sleep(seconds / 4)
    add_version(
        cluster.model_dir, cluster.model, corrupt, source=good, corrupt="truncate"
    )
    corrupt_answer = reload(cluster)
    serving = serving_version(cluster)
    # The operator removes the bad upload; a later start of the service (the Ray
    # replicas of --ray) would otherwise load the newest version, the corrupt one.
    shutil.rmtree(cluster.model_dir / cluster.model / corrupt)
    _sleep_until(t0 + seconds)
    return {
        "good": {"version": good, **good_answer},
        "corrupt": {"version": corrupt, **corrupt_answer},
        "serving_after": serving,
    }


def overloaded(cluster: Cluster, seconds: float) -> dict[str, Any]:
    """Extra clients on top of the usual ones, past ``COSTMODEL_MAX_INFLIGHT``."""
    extra = 3 * cluster.clients
    t0 = time.monotonic()
    time.sleep(seconds / 4)
    burst = cluster.crew()
    burst.start(extra, first_index=cluster.clients)
    try:
        time.sleep(seconds / 2)
    finally:
        burst.stop()
    _sleep_until(t0 + seconds)
    return {"extra_clients": extra}


def reload(cluster: Cluster) -> dict[str, Any]:
    response = httpx.post(
        f"{cluster.server.url}/v1/models/{cluster.model}/reload",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=120.0,  # loading and warming up on a busy core
    )
    body = response.json()
    out: dict[str, Any] = {"status": response.status_code}
    if response.is_success:
        out["served"] = body.get("version")
    else:
        out["code"] = body.get("error", {}).get("code")
    return out


def serving_version(cluster: Cluster) -> str | None:
    response = httpx.get(f"{cluster.server.url}/v1/models", timeout=30.0)
    for model in response.json().get("models", []):
        if model.get("name") == cluster.model:
            return str(model.get("version"))
    return None


def ray_available() -> bool:
    import importlib.util

    # The Ray app always ships with the service; Ray itself is the ray extra.
    return importlib.util.find_spec("ray") is not None


FAULTS: dict[str, Callable[[Cluster, float], dict[str, Any]]] = {
    "baseline": baseline,
    "redis_paused": redis_paused,
    "redis_restarted": redis_restarted,
    "postgres_restarted": postgres_restarted,
    "model_reloaded": model_reloaded,
    "overloaded": overloaded,
}
