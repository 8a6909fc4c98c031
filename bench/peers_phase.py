"""Ours against the limit and against a peer (KServe), in one run on one machine.

For each batch size of ``plan.peer_sizes`` (1, 64, 1,000, 10,000 tile configs on one
cached graph): the median latency of raw onnxruntime in process, of our service
through the real client (npz body) and of KServe's model server with the same
``scorer.onnx`` (v2 REST, binary tensors; the client sorts its scores, as ours does
on the server); then configs/s under ``plan.peer_clients`` concurrent clients. Our
fixed cost: an empty route's round trip (``GET /livez``) and a 1-config rank. Then
our service again with 2 uvicorn workers, for the workers table; then, with the same
client processes, the shared-database figures (``fleet_phase``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from xla_costmodel.bench import fleet_phase, peer_kserve
from xla_costmodel.bench.inproc import Budget, open_runner, take_rows
from xla_costmodel.bench.peer_load import ClientPool, Server, Step, raw_rate
from xla_costmodel.bench.timing import time_calls
from xla_costmodel.clients import CostModelClient, prepare_graph
from xla_costmodel.harness import (
    ProcessError,
    ServiceServer,
    rss_mb,
    wait_until,
)
from xla_costmodel.runner import ArtifactRunner, Embedding
from xla_costmodel.tpugraphs.arrays import Graph

Log = Callable[[str], None]


def peer_figures(
    plan: Any,
    tile_dir: Path,
    graph: Graph,
    pool: np.ndarray,
    ours_url: str,
    workers_env: dict[str, str],
    workdir: Path,
    log: Log,
) -> dict[str, Any]:
    """Every figure of the phase; KServe's are null with a note if it cannot run."""
    runner = open_runner(tile_dir, 1)
    embedding = runner.encode(graph)
    vector = embedding["graph_embedding"]
    sizes: tuple[int, ...] = plan.peer_sizes
    batches = {n: take_rows(pool, n) for n in (*sizes, plan.tile_configs)}
    out: dict[str, Any] = fixed_cost(ours_url, graph, batches[1], plan.peer_latency)
    latency, rates = _raw_figures(plan, runner, embedding, batches)
    with ExitStack() as stack:
        kserve = start_kserve(stack, tile_dir, workdir, log, out)
        urls: dict[Server, str] = {"ours": ours_url}
        if kserve is not None:
            urls["kserve"] = kserve.url
            out.update(kserve_single(kserve.url, vector, batches, plan, latency))
        log(f"peers: ours vs kserve latency and {plan.peer_clients} clients")
        _ours_latency(plan, ours_url, graph, batches, latency)
        pool_ = stack.enter_context(
            ClientPool(plan.peer_clients, graph, vector, batches[max(sizes)])
        )
        errors = _load_rates(plan, pool_, urls, rates)
        out["workers_table"] = workers_table(
            plan, pool_, ours_url, rates, workers_env, workdir, graph, log
        )
        out.update(
            fleet_phase.fleet_figures(
                plan.fleet, pool_, graph, pool, workers_env, workdir, log
            )
        )
        out["peer_load_errors"] = errors
    for n in sizes:
        latency[str(n)].setdefault("kserve", None)
        rates[str(n)].setdefault("kserve", None)
    out["peer_latency_ms"] = latency
    out["peer_throughput_configs_per_s"] = rates
    out["peer_clients"] = plan.peer_clients
    return out


Figures = dict[str, dict[str, float | None]]  # batch size -> server -> figure


def _raw_figures(
    plan: Any,
    runner: ArtifactRunner,
    embedding: Embedding,
    batches: dict[int, np.ndarray],
) -> tuple[Figures, Figures]:
    """Raw onnxruntime in process: latency and configs/s per batch size."""
    latency: Figures = {}
    rates: Figures = {}
    for n in plan.peer_sizes:
        t = time_calls(
            partial(runner.score, embedding, batches[n]),
            plan.peer_latency.repeats,
            plan.peer_latency.seconds,
        )
        latency[str(n)] = {"raw": t.median_ms}
        rates[str(n)] = {
            "raw": raw_rate(
                lambda c: runner.score(embedding, c),
                batches[n],
                plan.peer_clients,
                plan.peer_load_seconds,
            )
        }
    return latency, rates


def _ours_latency(
    plan: Any,
    ours_url: str,
    graph: Graph,
    batches: dict[int, np.ndarray],
    latency: Figures,
) -> None:
    """Our service's median latency through the real client, per batch size."""
    with CostModelClient(ours_url, timeout=120.0) as client:
        prepared = prepare_graph(graph)
        for n in plan.peer_sizes:
            t = time_calls(
                partial(client.rank, "tile", prepared, batches[n]),
                plan.peer_latency.repeats,
                plan.peer_latency.seconds,
            )
            latency[str(n)]["ours"] = t.median_ms


def _load_rates(
    plan: Any, pool: ClientPool, urls: dict[Server, str], rates: Figures
) -> int:
    """Configs/s of every server under the client pool; the failed requests."""
    errors = 0
    for n in plan.peer_sizes:
        for server, url in urls.items():
            rate, failed = pool.rate(Step(server, url, n, plan.peer_load_seconds))
            rates[str(n)][server] = rate
            errors += failed
    return errors


def fixed_cost(
    url: str, graph: Graph, one: np.ndarray, budget: Budget
) -> dict[str, Any]:
    """An empty route's round trip and a 1-config rank, both on keep-alive
    connections: through the real client, and as a bare JSON request."""
    with (
        httpx.Client(base_url=url, timeout=30.0) as http,
        CostModelClient(url, timeout=30.0) as client,
    ):
        prepared = prepare_graph(graph)
        empty = time_calls(
            lambda: http.get("/livez").raise_for_status(),
            budget.repeats,
            budget.seconds,
        )
        ranked = time_calls(
            lambda: client.rank("tile", prepared, one), budget.repeats, budget.seconds
        )
        body = {"model": "tile", "graph_id": prepared.graph_id, "configs": one.tolist()}
        bare = time_calls(
            lambda: http.post("/v1/rank", json=body).raise_for_status(),
            budget.repeats,
            budget.seconds,
        )
    return {
        "empty_route_ms": empty.median_ms,
        "rank_1_config_ms": ranked.median_ms,
        "rank_1_config_bare_ms": bare.median_ms,
    }


def start_kserve(
    stack: ExitStack, tile_dir: Path, workdir: Path, log: Log, out: dict[str, Any]
) -> peer_kserve.KServeServer | None:
    log(f"peers: KServe from {peer_kserve.VENV} (created on first use)")
    try:
        python = peer_kserve.ensure_venv()
        server = peer_kserve.KServeServer(workdir, python, tile_dir / "scorer.onnx")
        stack.enter_context(server)
    except (ProcessError, OSError) as exc:
        out["peer_kserve_note"] = f"KServe could not run: {exc}"[:2000]
        return None
    out["peer_kserve_rss_mb"] = rss_mb(server.pid)
    return server


def kserve_single(
    url: str,
    vector: np.ndarray,
    batches: dict[int, np.ndarray],
    plan: Any,
    latency: dict[str, dict[str, float | None]],
) -> dict[str, Any]:
    ranker = peer_kserve.KServeRanker(url)
    try:
        big = batches[plan.tile_configs]
        t = time_calls(
            lambda: ranker.rank(vector, big), plan.http.repeats, plan.http.seconds
        )
        for n in plan.peer_sizes:
            s = time_calls(
                partial(ranker.rank, vector, batches[n]),
                plan.peer_latency.repeats,
                plan.peer_latency.seconds,
            )
            latency[str(n)]["kserve"] = s.median_ms
        empty = time_calls(
            ranker.live, plan.peer_latency.repeats, plan.peer_latency.seconds
        )
    finally:
        ranker.close()
    return {
        "peer_kserve_configs_per_s": t.rate(len(big)),
        "peer_kserve_ms": t.median_ms,
        "peer_kserve_empty_route_ms": empty.median_ms,
    }


def workers_table(
    plan: Any,
    pool: ClientPool,
    one_worker_url: str,
    rates: dict[str, dict[str, float | None]],
    env: dict[str, str],
    workdir: Path,
    graph: Graph,
    log: Log,
) -> list[dict[str, Any]]:
    """Configs/s under the clients with 1 and 2 uvicorn workers (same Redis: the
    second worker's first request of the graph is a Redis hit)."""
    sizes = plan.worker_sizes
    rows = [{"workers": 1, **{str(n): rates[str(n)]["ours"] for n in sizes}}]
    if not sizes:  # the smoke plan: starting a second server costs ~20 s there
        return rows
    log("peers: our service with 2 uvicorn workers")
    with ServiceServer(workdir, env, workers=2) as two:
        # /readyz answers from whichever worker accepts: ask until many in a row agree.
        wait_until(lambda: all(two.ready() for _ in range(10)), 60.0)
        with CostModelClient(two.url, timeout=120.0) as client:
            client.upload_graph("tile", prepare_graph(graph))
        row: dict[str, Any] = {"workers": 2}
        for n in sizes:
            row[str(n)] = pool.rate(Step("ours", two.url, n, plan.peer_load_seconds))[0]
        rows.append(row)
    return rows
