"""One benchmark run: in-process baselines, then the service under uvicorn with Redis,
then teardown. Every process started here is stopped in ``finally`` (``ExitStack``).

The result is the flat dict ``report.KEYS`` describes plus run metadata (date, machine,
core count, load average before and after, versions) and the latency sweep.
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from xla_costmodel import shipped_models
from xla_costmodel.bench import inproc, layout_phase, peers_phase, torch_eager
from xla_costmodel.bench.data import (
    TileWorkload,
    layout_sample,
    tile_workload,
    tpugraphs_root,
)
from xla_costmodel.bench.http_phase import BODIES, HttpRanker
from xla_costmodel.bench.load import LoadTarget, run_load
from xla_costmodel.bench.plan import Plan
from xla_costmodel.bench.plot import latency_plot, sweep_table
from xla_costmodel.bench.report import add_ratios
from xla_costmodel.clients import CostModelClient, PreparedGraph, prepare_graph
from xla_costmodel.harness import RedisServer, ServiceServer, rss_mb
from xla_costmodel.tpugraphs.arrays import Sample

Log = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    model_dir: Path = field(default_factory=shipped_models)
    out: Path = Path("bench/results")  # from the repository root (make)
    threads: int = 1  # onnxruntime intra-op threads, in process and in the server
    workers: int | None = None  # the server's inference workers (None: its default)
    tile_model: str = "tile"
    layout_model: str = "layout"
    server_env: dict[str, str] = field(
        default_factory=dict
    )  # extra COSTMODEL_* settings


def run(plan: Plan, opts: Options, log: Log) -> dict[str, Any]:
    started = time.monotonic()
    result = metadata(plan, opts)
    tile = tile_workload(pool=plan.tile_configs)
    layout = layout_sample(plan.layout_graph)
    sweep: dict[str, dict[int, float]] = {}
    log("in process: onnxruntime scorer, torch eager, layout encoder")
    result.update(in_process(plan, opts, tile, layout, sweep))
    with tempfile.TemporaryDirectory(prefix="costmodel-bench-") as tmp:
        result.update(served(plan, opts, tile, layout, sweep, Path(tmp), log))
    add_ratios(result)
    result["sweep_ms"] = sweep_table(sweep, plan.sweep_sizes)
    result["plot"] = str(write_plot(sweep, plan, opts, result))
    result["loadavg_after"] = list(os.getloadavg())
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def metadata(plan: Plan, opts: Options) -> dict[str, Any]:
    import onnxruntime

    return {
        "mode": plan.mode,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "machine": f"{platform.node()} {cpu_model()} {platform.machine()}",
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "intra_op_threads": opts.threads,
        "server_env": opts.server_env,
        "tile_configs_per_request": plan.tile_configs,
        "loadavg_before": list(os.getloadavg()),
        "torch": torch_eager.torch_available(),
    }


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def in_process(
    plan: Plan,
    opts: Options,
    tile: TileWorkload,
    layout: Sample,
    sweep: dict[str, dict[int, float]],
) -> dict[str, Any]:
    tile_dir = latest(opts.model_dir, opts.tile_model)
    runner = inproc.open_runner(tile_dir, opts.threads)
    embedding = runner.encode(tile.main.graph)
    configs = tile.main_configs
    raw = inproc.raw_scorer(runner, embedding, configs, plan.raw)
    sweep["raw onnxruntime"] = {
        n: t.median_ms
        for n, t in inproc.raw_sweep(
            runner, embedding, configs, plan.sweep_sizes, plan.sweep
        ).items()
    }
    out: dict[str, Any] = {"raw_scorer_configs_per_s": raw.rate(len(configs))}
    eager = torch_eager.tile_scorer(
        tile_dir,
        tile.main.graph,
        configs,
        runner.score(embedding, configs),
        plan.torch,
        opts.threads,
    )
    out.update(eager.figures(len(configs)))
    encoder_runner = inproc.open_runner(
        latest(opts.model_dir, opts.layout_model), opts.threads
    )
    out["encoder_ms_nlp"] = inproc.encoder(
        encoder_runner, layout.graph, plan.encoder
    ).median_ms
    return out


def latest(model_dir: Path, name: str) -> Path:
    from xla_costmodel.manifest import list_versions

    versions = list_versions(model_dir, name)
    if not versions:
        raise FileNotFoundError(f"no artifact for model {name!r} under {model_dir}")
    return model_dir / name / versions[-1]


def server_env(
    opts: Options, redis_url: str, memory_cache: bool = True
) -> dict[str, str]:
    env = {
        "COSTMODEL_MODEL_DIR": str(opts.model_dir),
        "COSTMODEL_MODELS": f"{opts.tile_model},{opts.layout_model}",
        "COSTMODEL_REDIS_URL": redis_url,
        "COSTMODEL_LOG_LEVEL": "WARNING",
        # The benchmark's own requests are large and slow on a loaded machine.
        "COSTMODEL_REDIS_TIMEOUT_S": "2",
        # Its own measurement database, never the working directory's data/.
        "COSTMODEL_DATA_DIR": tempfile.mkdtemp(prefix="costmodel-bench-data-"),
    }
    if opts.workers is not None:
        env["COSTMODEL_INFERENCE_WORKERS"] = str(opts.workers)
    env.update(opts.server_env)
    if not memory_cache:
        env["COSTMODEL_MEMORY_CACHE_BYTES"] = "0"
    return env


def served(
    plan: Plan,
    opts: Options,
    tile: TileWorkload,
    layout: Sample,
    sweep: dict[str, dict[int, float]],
    workdir: Path,
    log: Log,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with ExitStack() as stack:
        log("starting redis-server and the service (uvicorn, 1 worker)")
        redis = stack.enter_context(RedisServer(workdir))
        server = stack.enter_context(
            ServiceServer(workdir, server_env(opts, redis.url))
        )
        out["server_rss_mb_start"] = rss_mb(server.pid)
        ranker = HttpRanker(server.url, opts.tile_model)
        stack.callback(ranker.close)
        graphs = [prepare_graph(s.graph) for s in tile.samples]
        for g in graphs:
            ranker.client.upload_graph(opts.tile_model, g)
        log("http: 10,000 tile configs, binary and JSON; latency sweep")
        out.update(http_figures(plan, ranker, graphs[0], tile.main_configs, sweep))
        out["server_rss_mb_after_http"] = rss_mb(server.pid)
        log("peers: raw onnxruntime, ours, KServe; fixed cost; 1 vs 2 workers")
        peers = peers_phase.peer_figures(
            plan,
            latest(opts.model_dir, opts.tile_model),
            tile.main.graph,
            tile.main_configs,
            server.url,
            server_env(opts, redis.url),
            workdir,
            log,
        )
        out.update(peers)
        log("layout: cold, cached, all configs, Redis hit")
        out.update(layout_figures(plan, opts, layout, server.url, redis, workdir))
        log(f"load: {plan.load.clients} clients for {plan.load.seconds:.0f} s")
        out["server_rss_mb_before"] = rss_mb(server.pid)
        target = LoadTarget(
            server.url, opts.tile_model, plan.tile_configs, tpugraphs_root()
        )
        load = run_load(target, plan.load)
        out["server_rss_mb_after"] = rss_mb(server.pid)
        out.update(load.figures(plan.load))
        out["load_error_kinds"] = load.error_kinds
    return out


def http_figures(
    plan: Plan,
    ranker: HttpRanker,
    graph: PreparedGraph,
    configs: np.ndarray,
    sweep: dict[str, dict[int, float]],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    answers = {body: ranker.rank(body, graph, configs).ranking for body in BODIES}
    if len(set(answers.values())) != 1:
        raise RuntimeError("npz and JSON requests ranked the same configs differently")
    for body in BODIES:
        timings = ranker.timed(body, graph, configs, plan.http)
        out[f"http_{body}_configs_per_s"] = timings.rate(len(configs))
        out[f"http_{body}_ms"] = timings.median_ms
        series = ranker.sweep(body, graph, configs, plan.sweep_sizes, plan.sweep)
        sweep[f"HTTP {body}"] = {n: t.median_ms for n, t in series.items()}
    return out


def layout_figures(
    plan: Plan,
    opts: Options,
    layout: Sample,
    url: str,
    redis: RedisServer,
    workdir: Path,
) -> dict[str, Any]:
    with CostModelClient(url, timeout=120.0) as client:
        round_ = layout_phase.LayoutRound(
            client,
            opts.layout_model,
            prepare_graph(layout.graph),
            layout.configs,
            plan.layout_batch,
        )
        cold = layout_phase.cold(round_, layout, redis, plan.layout_cold)
        cached = layout_phase.cached(round_, plan.layout_cached)
        every = layout_phase.all_configs(round_, plan.layout_all)
    env = server_env(opts, redis.url, memory_cache=False)
    with (
        ServiceServer(workdir, env) as bare,
        CostModelClient(bare.url, timeout=120.0) as client,
    ):
        redis_round = layout_phase.LayoutRound(
            client, opts.layout_model, round_.graph, layout.configs, plan.layout_batch
        )
        hits = layout_phase.redis_hits(redis_round, plan.layout_redis)
    return {
        "layout_cold_ms": cold.median_ms,
        "layout_cached_ms": cached.median_ms,
        "layout_redis_hit_ms": hits.median_ms,
        "layout_all_configs_ms": every.median_ms,
        "layout_configs": int(layout.configs.shape[0]),
        "layout_cache_tiers": {**round_.tiers, **redis_round.tiers},
    }


def write_plot(
    sweep: dict[str, dict[int, float]],
    plan: Plan,
    opts: Options,
    result: dict[str, Any],
) -> Path:
    name = (
        "latency_vs_batch.png"
        if plan.mode == "full"
        else f"latency_vs_batch_{plan.mode}.png"
    )
    subtitle = f"{result['date']}, {result['cpu_count']} cores, {plan.mode} mode"
    return latency_plot(sweep, opts.out / name, subtitle)
