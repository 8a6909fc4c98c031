"""``costmodel chaos [--quick] [--json] [--ray]``: faults under load, on loopback,
bounded in time.

Starts a ``redis-server``, a throwaway PostgreSQL cluster and ``costmodel serve`` (with
PostgreSQL as its database, Redis as its embedding cache, a private copy of the tile
model, a low ``COSTMODEL_MAX_INFLIGHT``), then keeps ``clients`` threads ranking and
sending feedback through the project's client while, one phase each, the faults of
``chaos.faults`` happen in turn: baseline, Redis paused, Redis killed and
restarted, PostgreSQL restarted, a model reloaded (good, then corrupt), the server
overloaded. A soak phase of plain load follows, over which the server's RSS growth is
measured. Afterwards every feedback row the service acknowledged is looked up in
PostgreSQL's ``measurements`` table: ``feedback_lost`` counts the missing ones, and the
command exits 1 when there are any.
"""

from __future__ import annotations

import secrets
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xla_costmodel import shipped_models
from xla_costmodel.chaos.faults import (
    ADMIN_TOKEN,
    FAULTS,
    Cluster,
    costmodel_serve,
    ray_available,
)
from xla_costmodel.chaos.load import Crew, Ledger, Recorder, Workload
from xla_costmodel.harness import PostgresServer, RedisServer, copy_artifact, rss_mb

RSS_GOAL = 0.10


@dataclass(frozen=True)
class Plan:
    mode: str
    phase_s: float  # each fault phase
    soak_s: float
    clients: int = 8
    pool: int = 64  # synthetic configs per real tile graph

    @property
    def max_inflight(self) -> int:
        # Above what the clients and one admin call ever have in flight at once, so
        # only the overload phase's extra clients are refused.
        return self.clients + 2


PLANS = {
    "full": Plan("full", phase_s=60.0, soak_s=600.0),
    "quick": Plan("quick", phase_s=12.0, soak_s=60.0),
}


def run(plan: Plan, log: Any = print, ray: bool = False) -> dict[str, Any]:
    """One chaos run; every process it starts is stopped before it returns.

    ``ray``: add the ``replica_killed`` phase (``chaos.ray_phase``) when
    Ray is installed (the ray extra); otherwise it is listed as skipped.
    """
    started = time.monotonic()
    recorder, ledger = Recorder(), Ledger()
    skipped: list[dict[str, str]] = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="chaos-")))
        log("starting redis-server, PostgreSQL and costmodel serve")
        cluster = start_cluster(stack, tmp, plan, recorder, ledger)
        recorder.begin("startup")
        crew = start_crew(stack, cluster)
        for name, fault in FAULTS.items():
            log(f"phase {name} ({plan.phase_s:g} s)")
            phase = recorder.begin(name)
            before, t0 = server_counters(cluster.server.url), time.monotonic()
            phase.fault = fault(cluster, plan.phase_s)
            phase.seconds = time.monotonic() - t0
            phase.server = counter_deltas(before, server_counters(cluster.server.url))
        if ray and ray_available():
            log(f"phase replica_killed (Ray Serve start-up, then {plan.phase_s:g} s)")
            crew.stop()  # this phase's clients talk to the replicas only
            phase = recorder.begin("replica_killed")
            t0 = time.monotonic()
            phase.fault = replica_killed(cluster, plan.phase_s)
            phase.seconds = time.monotonic() - t0 - phase.fault["startup_s"]
            recorder.begin("restart")
            crew = start_crew(stack, cluster)
        elif ray:
            reason = "ray is not installed: pip install 'xla-costmodel[ray]'"
            skipped.append({"phase": "replica_killed", "reason": reason})
        log(f"soak ({plan.soak_s:g} s)")
        cluster.workload.fresh.enabled = False
        soak = recorder.begin("soak")
        soak.fault = measure_rss(cluster.server.pid, plan.soak_s)
        soak.seconds = plan.soak_s
        crew.stop()
        found = stored_runtimes(cluster.postgres.url)
    phases = [
        p.summary() for p in recorder.phases if p.name not in ("startup", "restart")
    ]
    result = report(plan, phases, ledger, found, soak.fault)
    result["skipped"] = skipped
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def start_crew(stack: ExitStack, cluster: Cluster) -> Crew:
    crew = cluster.crew()
    crew.start(cluster.clients)
    stack.callback(crew.stop)  # also on failure: no thread outlives the run
    return crew


def replica_killed(cluster: Cluster, seconds: float) -> dict[str, Any]:
    from xla_costmodel.chaos.ray_phase import replica_killed as phase

    return phase(cluster, seconds)


def start_cluster(
    stack: ExitStack, tmp: Path, plan: Plan, recorder: Recorder, ledger: Ledger
) -> Cluster:
    from xla_costmodel.bench.data import tile_workload
    from xla_costmodel.bench.harness import latest
    from xla_costmodel.clients import prepare_graph

    model_dir = tmp / "artifacts"
    copy_artifact(latest(shipped_models(), "tile"), model_dir / "tile" / "1")
    redis = stack.enter_context(RedisServer(tmp))
    postgres = stack.enter_context(PostgresServer(tmp))
    token = create_writer(postgres.url)
    env = {
        "COSTMODEL_MODEL_DIR": str(model_dir),
        "COSTMODEL_MODELS": "tile",
        "COSTMODEL_REDIS_URL": redis.url,
        "COSTMODEL_DATABASE_URL": postgres.url,
        "COSTMODEL_DATA_DIR": str(tmp / "data"),
        "COSTMODEL_MAX_INFLIGHT": str(plan.max_inflight),
        "COSTMODEL_ADMIN_TOKEN": ADMIN_TOKEN,
        "COSTMODEL_FEEDBACK_AUTH": "token",  # as deployed, although on loopback
        # Required with Redis and tokens (the test cluster's database URL has no
        # password to derive it from): seals what the service keeps in Redis.
        "COSTMODEL_REDIS_HMAC_KEY": "chaos-" + secrets.token_hex(16),
        "COSTMODEL_LOG_LEVEL": "WARNING",
    }
    server = stack.enter_context(costmodel_serve(tmp, env))
    tile = tile_workload(pool=plan.pool)
    raw = [s.graph for s in tile.samples]
    workload = Workload(
        "tile", raw, [prepare_graph(g) for g in raw], tile.configs, token=token
    )
    return Cluster(
        redis,
        postgres,
        server,
        model_dir,
        "tile",
        plan.clients,
        workload,
        recorder,
        ledger,
    )


def create_writer(database_url: str) -> str:
    """A writer for the run's clients, as ``costmodel tokens create`` makes one."""
    from xla_costmodel.service.store import MeasurementStore

    store = MeasurementStore.open(database_url)
    try:
        return store.writers.create("chaos")
    finally:
        store.close()


# Server-side evidence that a fault was felt: (metric family, label filter) -> name.
COUNTERS = {
    "redis_errors": ("costmodel_cache_errors", {"level": "redis"}),
    "redis_bypassed": ("costmodel_cache_bypassed", {"level": "redis"}),
    "redis_hits": ("costmodel_cache_hits", {"level": "redis"}),
    "database_errors": ("costmodel_store_errors", {}),
    "reloads_loaded": ("costmodel_model_reloads", {"result": "loaded"}),
    "reloads_failed": ("costmodel_model_reloads", {"result": "failed"}),
}


def server_counters(url: str) -> dict[str, float]:
    """The ``COUNTERS`` from the server's ``/metrics`` (never refused as overloaded)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=30.0).text
    out = dict.fromkeys(COUNTERS, 0.0)
    for family in text_string_to_metric_families(text):
        for name, (wanted, labels) in COUNTERS.items():
            if family.name != wanted:
                continue
            out[name] += sum(
                s.value
                for s in family.samples
                if s.name.endswith("_total")
                and all(s.labels.get(k) == v for k, v in labels.items())
            )
    return out


def counter_deltas(
    before: dict[str, float], after: dict[str, float]
) -> dict[str, float]:
    return {name: after[name] - before[name] for name in COUNTERS}


def measure_rss(pid: int, seconds: float) -> dict[str, Any]:
    """RSS at the start and end of the soak (and its peak, sampled every second)."""
    start = peak = rss_mb(pid)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        peak = max(peak, rss_mb(pid))
    end = rss_mb(pid)
    return {
        "rss_mb_start": round(start, 1),
        "rss_mb_end": round(end, 1),
        "rss_mb_peak": round(max(peak, end), 1),
    }


def stored_runtimes(database_url: str) -> dict[int, int]:
    """Feedback rows in the measurements table: runtime_ns -> how many rows."""
    from sqlalchemy import create_engine, func, select

    from xla_costmodel.service.store.engine import normalise_url
    from xla_costmodel.service.store.schema import measurements as m

    engine = create_engine(normalise_url(database_url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(m.c.runtime_ns, func.count())
                .where(m.c.source == "feedback")
                .group_by(m.c.runtime_ns)
            ).all()
    finally:
        engine.dispose()
    return {int(runtime): int(n) for runtime, n in rows}


def report(
    plan: Plan,
    phases: list[dict[str, Any]],
    ledger: Ledger,
    found: dict[int, int],
    rss: dict[str, Any],
) -> dict[str, Any]:
    lost = sum(1 for r in ledger.acknowledged if r not in found)
    growth = (rss["rss_mb_end"] - rss["rss_mb_start"]) / rss["rss_mb_start"]
    by_name = {p["name"]: p for p in phases}
    reload = by_name["model_reloaded"]["fault"]
    checks = {
        "no_feedback_lost": lost == 0,
        "no_feedback_stored_twice": all(n == 1 for n in found.values()),
        "overload_503_with_retry_after": by_name["overloaded"]["retry_after"] > 0,
        "good_reload_served": reload["good"].get("served") == reload["good"]["version"],
        "corrupt_reload_refused": reload["corrupt"]["status"] == 409
        and reload["serving_after"] == reload["good"]["version"],
        "no_500s": all(p["500s"] == 0 for p in phases),
        "rss_growth_under_10_percent": growth < RSS_GOAL,
    }
    return {
        "mode": plan.mode,
        "clients": plan.clients,
        "max_inflight": plan.max_inflight,
        "phase_s": plan.phase_s,
        "soak_s": plan.soak_s,
        "phases": phases,
        "feedback_acknowledged": ledger.acknowledged_calls,
        "feedback_acknowledged_rows": len(ledger.acknowledged),
        "feedback_rows_in_database": sum(found.values()),
        "feedback_lost": lost,
        "feedback_short_answers": ledger.short_answers,
        "rss_growth": round(growth, 4),
        "rss": rss,
        "checks": checks,
    }
