"""The rank path with a shared database: statements per rank, staleness, throughput.

Replicas share their measurements in PostgreSQL and learn of each other's writes
through Redis (``service/core/generations.py``), so a rank of a known graph should send
no statement and still see another replica's acknowledged feedback within a bound.
This phase measures both, in the same run as the rest of the bench:

- ``throughput_2w_postgres_rps`` / ``throughput_2w_nodb_rps``: requests per second
  of 64-config ranks (adaptation on, the client's default) from the peers phase's
  client processes, against a 2-worker service on PostgreSQL and against a 2-worker
  service on its own SQLite file (no database server), steps interleaved; first, so
  that no measurement of the graph exists yet in either (the same work but for the
  database's part).
- ``statements_per_rank``: a 1-worker service on PostgreSQL; the graph is ranked (and
  so uploaded and warmed) first, then ``FleetPlan.ranks`` 1-config ranks of the cached
  graph; the service's own ``costmodel_db_statements_total`` (GET /metrics) before
  and after, divided by the ranks.
- ``staleness_ms`` / ``staleness_p50_ms``: ``FleetPlan.trials`` times, 6 new measured
  configs of a graph through the 2-worker service on the same PostgreSQL and Redis,
  then 1-config ranks through the 1-worker service until its ``adapted`` count shows
  them: the delay from the feedback's acknowledgement to the first such answer.
  Both are separate processes, whichever worker took the feedback.

The feedback needs no writer token: the services listen on loopback only, where
``COSTMODEL_FEEDBACK_AUTH=auto`` lets anyone write. Without PostgreSQL binaries the
figures are null and ``fleet_note`` says why.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from xla_costmodel.bench.peer_load import ClientPool, Step
from xla_costmodel.clients import CostModelClient, PreparedGraph, prepare_graph
from xla_costmodel.harness import (
    PostgresServer,
    ProcessError,
    ServiceServer,
    wait_until,
)
from xla_costmodel.tpugraphs.arrays import Graph

Log = Callable[[str], None]
FEEDBACK_ROWS = 6  # new measured configs per staleness trial (above the minimum, 4)
STALE_GIVE_UP_S = 5.0  # a trial that never sees the write fails the phase
THROUGHPUT_CONFIGS = 64  # per request: the autotuner's usual batch


@dataclass(frozen=True)
class FleetPlan:
    """How much of the phase a mode runs."""

    ranks: int  # 1-config ranks counted for statements_per_rank
    trials: int  # staleness trials
    rounds: int  # interleaved (postgres, nodb) throughput steps, each of ``seconds``
    seconds: float


def fleet_figures(
    plan: FleetPlan,
    pool: ClientPool,
    graph: Graph,
    configs: np.ndarray,
    env: dict[str, str],
    workdir: Path,
    log: Log,
) -> dict[str, Any]:
    """Every figure of the phase; null with ``fleet_note`` if PostgreSQL cannot run.

    ``env`` is the bench's server environment (Redis, model directory, a fresh SQLite
    data directory); ``pool`` the peers phase's client processes.
    """
    tile = {**env, "COSTMODEL_MODELS": "tile"}  # one model: faster starts
    with ExitStack() as stack:
        try:
            pg = stack.enter_context(PostgresServer(workdir))
            database = pg.database_url(pg.create_database())
        except ProcessError as exc:
            return {**empty(), "fleet_note": f"PostgreSQL could not run: {exc}"[:2000]}
        log("fleet: 1 + 2 workers on PostgreSQL, 2 workers on SQLite")
        shared = {**tile, "COSTMODEL_DATABASE_URL": database}
        one = stack.enter_context(ServiceServer(workdir, shared))
        two = stack.enter_context(ServiceServer(workdir, shared, workers=2))
        nodb = stack.enter_context(ServiceServer(workdir, tile, workers=2))
        for server in (two, nodb):
            settled(server)
        # Throughput first, while neither database holds a measurement of the graph:
        # ranks on both then do the same work but for the database's part.
        log(f"fleet: 2 workers, PostgreSQL vs SQLite, {len(pool.procs)} clients")
        out = throughput(pool, two.url, nodb.url, plan)
        prepared = prepare_graph(graph)
        with (
            CostModelClient(one.url, timeout=60.0) as reader,
            CostModelClient(two.url, timeout=60.0) as writer,
        ):
            out.update(statements(reader, one.url, prepared, configs[:1], plan.ranks))
            log(f"fleet: staleness over {plan.trials} trials")
            out.update(staleness(writer, reader, one.url, prepared, configs, plan))
    return out


def settled(server: ServiceServer) -> None:
    """Until many ``/readyz`` in a row agree: it answers from whichever worker
    accepts, and a second worker may still be loading."""
    wait_until(lambda: all(server.ready() for _ in range(10)), 60.0)


def empty() -> dict[str, Any]:
    keys = (
        "statements_per_rank",
        "staleness_ms",
        "staleness_p50_ms",
        "throughput_2w_postgres_rps",
        "throughput_2w_nodb_rps",
        "postgres_over_nodb",
    )
    return dict.fromkeys(keys)


def metric(url: str, name: str) -> float:
    """One unlabelled sample of the service's Prometheus text (0 when absent)."""
    text = httpx.get(url + "/metrics", timeout=10.0).raise_for_status().text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def statements(
    client: CostModelClient,
    url: str,
    graph: PreparedGraph,
    one: np.ndarray,
    ranks: int,
) -> dict[str, Any]:
    """Statements the service sent per rank of a cached graph, by its own count."""
    for _ in range(2):  # upload inline, then a rank of the known graph
        client.rank("tile", graph, one)
    counter = "costmodel_db_statements_total"
    before = metric(url, counter)
    for _ in range(ranks):
        client.rank("tile", graph, one)
    sent = metric(url, counter) - before
    return {"statements_per_rank": sent / ranks, "statements_counted": before > 0}


def staleness(
    writer: CostModelClient,
    reader: CostModelClient,
    reader_url: str,
    graph: PreparedGraph,
    configs: np.ndarray,
    plan: FleetPlan,
) -> dict[str, Any]:
    """Acknowledged feedback through one process to the first adapted rank in
    another. Each trial measures configs no earlier trial did, so ``adapted`` grows
    by ``FEEDBACK_ROWS`` when the reader has seen it."""
    # Generations are only pushed while the reader's Redis subscription is live.
    subscribed = wait_until(
        lambda: metric(reader_url, "costmodel_generation_subscribed") > 0, 10.0
    )
    # Distinct rows: the count of measured configs is of distinct ones.
    _, first = np.unique(configs, axis=0, return_index=True)
    configs = configs[np.sort(first)]
    one = configs[:1]
    seen = reader.rank("tile", graph, one).adapted
    rng = np.random.default_rng(7)
    delays: list[float] = []
    for trial in range(plan.trials):
        rows = configs[(1 + trial * FEEDBACK_ROWS) : (1 + (trial + 1) * FEEDBACK_ROWS)]
        runtimes = rng.integers(1_000, 9_000, len(rows))
        writer.feedback("tile", graph, runtimes, configs=rows)
        acked = time.perf_counter()
        while reader.rank("tile", graph, one).adapted < seen + len(rows):
            if time.perf_counter() - acked > STALE_GIVE_UP_S:
                raise RuntimeError(f"trial {trial}: the reader never saw the write")
        delays.append(time.perf_counter() - acked)
        seen += len(rows)
    ms = [1000.0 * d for d in delays]
    return {
        "staleness_ms": max(ms),
        "staleness_p50_ms": statistics.median(ms),
        "staleness_trials": len(ms),
        "staleness_subscribed": subscribed,
    }


def throughput(
    pool: ClientPool, postgres_url: str, nodb_url: str, plan: FleetPlan
) -> dict[str, Any]:
    """Requests/s of 64-config ranks under the pool's clients, steps interleaved so
    a drift in the machine's speed falls on both servers alike."""
    rates: dict[str, list[float]] = {"postgres": [], "nodb": []}
    errors = 0
    for _ in range(plan.rounds):
        for name, url in (("postgres", postgres_url), ("nodb", nodb_url)):
            step = Step("ours", url, THROUGHPUT_CONFIGS, plan.seconds)
            rate, failed = pool.rate(step)
            rates[name].append(rate / THROUGHPUT_CONFIGS)
            errors += failed
    pg, nodb = (statistics.median(rates[k]) for k in ("postgres", "nodb"))
    return {
        "throughput_2w_postgres_rps": pg,
        "throughput_2w_nodb_rps": nodb,
        "postgres_over_nodb": pg / nodb if nodb else None,
        "fleet_load_errors": errors,
        "fleet_configs_per_request": THROUGHPUT_CONFIGS,
    }
