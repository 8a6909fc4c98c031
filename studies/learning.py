"""``python -m xla_costmodel.studies.learning [--quick] [--json] [--out DIR]``: per-graph
adaptation measured end to end, through real processes.

Starts a ``redis-server``, a throwaway PostgreSQL cluster and uvicorn services
(``xla_costmodel.harness``) on free loopback ports, each service with a fresh SQLite data
directory (or the PostgreSQL database), and drives them with the real client and the
real replay autotuner:

1. tile, leave-one-kernel-out (``studies.learning_tile``): per held-out kernel a
   model trained on the other files; the replay's slowdown per round for model +
   adaptation, the model alone, random (exact expectation), a per-graph fit without
   prior, and the kernel's default config;
2. layout, ``unet_3d.4x4.bf16`` (``studies.learning_layout``): Kendall tau after 50
   fed-back measurements, adapted vs prior, over seeds, against the file's own
   repeat-measurement ceiling; and the replay learning curve;
3. timings (``studies.learning_timing``): fit, adapted vs prior rank over HTTP,
   feedback on SQLite and on PostgreSQL.

Writes ``learning_curve.json`` and ``learning_curve.png`` to ``--out``
(``learning_curve_quick.*`` with ``--quick``, so a smoke run never overwrites the
full figures) and prints a summary, or the JSON with ``--json``. The JSON object:
``mode``, ``metadata`` (date, cpu_model, cpu_flags, cores, python, onnxruntime,
numpy, git_commit, load averages), ``plan``, ``definitions``; ``tile``: ``kernels``
(per held-out kernel: default_slowdown and per round each strategy), ``rounds`` (their
means, with the default's), ``goal``, ``long_curve``; ``layout``: ``headline``
(``seed0``, ``seeds``, ``seeds_1_to_n``, ``noise_ceiling``) and ``curve.per_round``;
``timings``: ``fit``, ``rank``, ``feedback`` (``p50_ms``, ``p90_ms``, ``n``);
``wall_s``; ``plot``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from xla_costmodel import shipped_models
from xla_costmodel.bench import require_harness
from xla_costmodel.clients import CostModelClient
from xla_costmodel.models.shipped import TILE_EPOCHS
from xla_costmodel.studies import learning_layout, learning_tile, learning_timing
from xla_costmodel.studies.learning_report import plot, summary

DEFAULT_OUT = Path("studies/results")  # from the repository root (make)
Log = Callable[[str], None]
DEFINITIONS = {
    "slowdown": "best runtime among the configs measured so far / the file's true "
    "best runtime - 1 (0: the best config was found)",
    "strategies": "slowdown = model + adaptation (the live replay loop, feedback "
    "after every round); model_slowdown = the model's prior top n; random_slowdown = "
    "exact expectation of the best of n uniformly random configs; per_graph_slowdown "
    "= a per-graph fit without prior (xla_costmodel.tpugraphs.adapt) on its own measurements, "
    "random until 2 distinct configs are measured",
    "default_slowdown": "tile: runtime of the default config (runtime equal to its "
    "config_runtime_normalizers entry) / true best - 1; layout files mark none",
    "round_means": "mean over kernels; a kernel whose configs ran out keeps its last "
    "round; measured = round * budget (nominal)",
    "kendall_tau": "xla_costmodel.tpugraphs.metrics.kendall_tau (tau-b) between scores and runtimes",
    "noise_ceiling": "tau between the first and second measurement of every config "
    "the unet file measures twice or more: the best tau any ranker can expect",
    "timings": "p50/p90 of time.perf_counter spans after warm-up; rank and feedback "
    "include client-side encoding and decoding",
}


@dataclass(frozen=True)
class Plan:
    mode: str
    kernels: int | None  # held-out tile kernels (None: every rankable one)
    tile_epochs: int
    long_rounds: int
    unet_rounds: int
    headline_seeds: int  # seeds 0..n-1
    fit_repeats: int
    rank_repeats: int
    feedback_repeats: int
    warmup: int
    tile_rounds: int = 3
    tile_budget: int = 2
    long_min_configs: int = 20
    unet_budget: int = 5


PLANS = {
    # TILE_EPOCHS is the shipped recipe; the quick run keeps it (a fold trains in
    # about a second) and holds out 3 kernels, fusion.191 among them.
    "full": Plan(
        "full",
        None,
        TILE_EPOCHS,
        long_rounds=10,
        unet_rounds=10,
        headline_seeds=10,
        fit_repeats=101,
        rank_repeats=100,
        feedback_repeats=200,
        warmup=3,
    ),
    "quick": Plan(
        "quick",
        3,
        TILE_EPOCHS,
        long_rounds=5,
        unet_rounds=4,
        headline_seeds=3,
        fit_repeats=11,
        rank_repeats=8,
        feedback_repeats=10,
        warmup=1,
    ),
}


def metadata() -> dict[str, Any]:
    import numpy
    import onnxruntime

    model, flags = cpu_info()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_model": model,
        "cpu_flags": flags,
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "numpy": numpy.__version__,
        "git_commit": _git("rev-parse", "HEAD"),
        "git_tracked_changes": bool(_git("status", "--porcelain", "-uno")),
        "loadavg_before": list(os.getloadavg()),
    }


def cpu_info() -> tuple[str, list[str]]:
    """Model name and the vector ISA flags (avx, avx2, avx512*, fma) of CPU 0."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = sorted(
        f
        for f in fields.get("flags", "").split()
        if f in ("avx", "avx2", "fma") or f.startswith("avx512")
    )
    return fields.get("model name") or platform.processor() or "unknown", flags


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def service_env(
    model_dir: Path, models: str, redis_url: str, data: Path | str
) -> dict[str, str]:
    """``data``: a SQLite data directory, or a database URL."""
    env = {
        "COSTMODEL_MODEL_DIR": str(model_dir),
        "COSTMODEL_MODELS": models,
        "COSTMODEL_REDIS_URL": redis_url,
        "COSTMODEL_LOG_LEVEL": "WARNING",
        "COSTMODEL_REDIS_TIMEOUT_S": "2",
    }
    if isinstance(data, Path):
        data.mkdir(parents=True, exist_ok=True)
        env["COSTMODEL_DATA_DIR"] = str(data)
    else:
        env["COSTMODEL_DATABASE_URL"] = data
    return env


def run(plan: Plan, shared: Path, log: Log) -> dict[str, Any]:
    """Every phase; each process started here is stopped on the way out."""
    from xla_costmodel.harness import PostgresServer, RedisServer, ServiceServer

    started = time.monotonic()
    result: dict[str, Any] = {
        "mode": plan.mode,
        "metadata": metadata(),
        "plan": asdict(plan),
        "definitions": DEFINITIONS,
    }
    with (
        tempfile.TemporaryDirectory(prefix="costmodel-learning-") as tmp,
        ExitStack() as stack,
    ):
        work = Path(tmp)
        kernels = learning_tile.train_models(
            shared,
            work / "artifacts",
            work / "runs",
            plan.kernels,
            plan.tile_epochs,
            log,
        )
        redis = stack.enter_context(RedisServer(work)).url
        log(f"tile: one service with {len(kernels)} models; replay")
        models = ",".join(k.model for k in kernels)
        env = service_env(work / "artifacts", models, redis, work / "data-tile")
        with served(work, env) as (_, client):
            result["tile"] = learning_tile.run(client, kernels, plan)
        log("layout: unet headline over seeds, replay curve, rank timing")
        unet = learning_layout.unet(shared)
        env = service_env(shipped_models(), "layout", redis, work / "data-layout")
        with served(work, env) as (url, client):
            result["layout"] = learning_layout.run(client, shared, plan)
            timings = learning_timing.adapted_rank(
                client, url, "layout", unet, plan, work
            )
        log("feedback timing: a SQLite service and a PostgreSQL service")
        pg = stack.enter_context(PostgresServer(work)).url
        envs = {
            "sqlite": service_env(shipped_models(), "layout", redis, work / "fb"),
            "postgresql": service_env(shipped_models(), "layout", redis, pg),
        }
        urls = {
            db: stack.enter_context(ServiceServer(work, e)).url
            for db, e in envs.items()
        }
        timings["feedback"] = learning_timing.feedback_timing(
            urls, "layout", unet, plan.feedback_repeats, plan.warmup
        )
        result["timings"] = timings
    result["metadata"]["loadavg_after"] = list(os.getloadavg())
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


@contextmanager
def served(workdir: Path, env: dict[str, str]) -> Iterator[tuple[str, CostModelClient]]:
    """A service process (its URL) and a client of it, both closed on the way out."""
    from xla_costmodel.harness import ServiceServer

    with (
        ServiceServer(workdir, env) as server,
        CostModelClient(server.url, timeout=120.0) as client,
    ):
        yield server.url, client


def finite(value: Any) -> Any:
    """NaN and infinities become null: the JSON stays standard."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def learning(
    quick: Annotated[
        bool, typer.Option("--quick", help="About 1 minute: 3 kernels, fewer rounds.")
    ] = False,
    json_: Annotated[
        bool, typer.Option("--json", help="Print the JSON object on stdout.")
    ] = False,
    out: Annotated[
        Path, typer.Option(help="Where the JSON and the PNG plot go.")
    ] = DEFAULT_OUT,
) -> None:
    """Measure per-graph adaptation end to end (real service, client and replay)."""
    # Before any work: an install without the process harness says so in one line.
    require_harness("python -m xla_costmodel.studies.learning")
    from xla_costmodel.bench.data import tpugraphs_root

    plan = PLANS["quick" if quick else "full"]

    def log(message: str) -> None:
        print(f"[learning] {message}", file=sys.stderr, flush=True)

    result = run(plan, tpugraphs_root(), log)
    stem = "learning_curve" if plan.mode == "full" else f"learning_curve_{plan.mode}"
    out = out.resolve()
    result["plot"] = str(plot(result, out / f"{stem}.png"))
    result = finite(result)
    path = out / f"{stem}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result) if json_ else summary(result) + f"\njson: {path}")


def main() -> None:
    typer.run(learning)


if __name__ == "__main__":
    main()
