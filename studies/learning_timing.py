"""Phase 3 of ``xla_costmodel.studies.learning``: what adaptation costs, in time.

- ``fit``: ``xla_costmodel.tpugraphs.adapt.fit`` in process on 2,000 distinct configs of unet (62
  configurable nodes), built from its real configs by swapping node layouts between
  them; each keeps the runtime of the config it was built from, and the prior is the
  shipped layout model's score (asked of the service with ``adapt=false``).
- ``rank``: 1,000 real unet configs over HTTP (npz body, the real client), adapted
  to those 2,000 measurements (fed back through the client; the first request
  refits, later ones use the cached fit) against the prior alone, interleaved A/B
  (ABBA order) in one run.
- ``feedback``: 64 real unet rows per request through the client (a fresh
  Idempotency-Key each), to a SQLite service and a PostgreSQL service, interleaved.

Every figure is a median and 90th percentile of ``time.perf_counter`` spans after
warm-up calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from statistics import median
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

from xla_costmodel.bench.timing import percentile
from xla_costmodel.clients import (
    CostModelClient,
    PreparedGraph,
    TuningSession,
    prepare_graph,
)
from xla_costmodel.tpugraphs import adapt
from xla_costmodel.tpugraphs.arrays import Sample

SYNTHETIC = 2000
RANKED = 1000
FEEDBACK_BATCH = 64
TIMING_TARGET = "tpu-v3.timing"  # the 2,000 synthetic measurements live here only
FIT_GOAL_MS = 20.0
RANK_RATIO_GOAL = 1.5


def spans(seconds: list[float]) -> dict[str, float | int]:
    ms = [1000.0 * s for s in seconds]
    return {"p50_ms": median(ms), "p90_ms": percentile(ms, 90), "n": len(ms)}


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def synthetic_configs(
    sample: Sample, n: int = SYNTHETIC, swap: float = 0.3, seed: int = 0
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """``n`` distinct configs: each a real config with ~``swap`` of its nodes' layouts
    taken from other real configs; runtimes are the base configs' runtimes."""
    rng = np.random.default_rng(seed)
    c = sample.configs
    nc = c.shape[1]
    base = rng.integers(0, len(c), 4 * n)
    donor = c[rng.integers(0, len(c), (4 * n, nc)), np.arange(nc)]
    mixed = np.where((rng.random((4 * n, nc)) < swap)[:, :, None], donor, c[base])
    _, first = np.unique(mixed.reshape(len(mixed), -1), axis=0, return_index=True)
    keep = np.sort(first)[:n]
    if keep.size < n:
        raise RuntimeError(f"only {keep.size} distinct synthetic configs")
    return mixed[keep].astype(np.float32), sample.runtimes[base[keep]]


def fit_timing(
    configs: npt.NDArray[np.float32],
    runtimes: npt.NDArray[np.int64],
    prior: npt.NDArray[np.float64],
    repeats: int,
    warmup: int,
    workdir: Path,
) -> dict[str, Any]:
    """Time ``adapt.fit`` in fresh processes without torch, as the service runs it
    (numpy's default BLAS threads) and with one BLAS thread: on 2 shared cores a
    busy neighbour makes a second BLAS thread cost more than it gives."""
    inputs = workdir / "fit-inputs.npz"
    np.savez(inputs, configs=configs, runtimes=runtimes, prior=prior)
    out: dict[str, Any] = {
        "measurements": len(configs),
        "configurable_nodes": int(configs.shape[1]),
        "goal_ms": FIT_GOAL_MS,
    }
    for label, threads in (("default_blas_threads", None), ("one_blas_thread", "1")):
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
        env.update({"OPENBLAS_NUM_THREADS": threads} if threads else {})
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "xla_costmodel.studies.learning_timing",
                str(inputs),
                str(repeats),
                str(warmup),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise RuntimeError(f"fit timing failed:\n{done.stderr}")
        out[label] = {**json.loads(done.stdout), "OPENBLAS_NUM_THREADS": threads}
    out["met"] = float(out["default_blas_threads"]["p50_ms"]) <= FIT_GOAL_MS
    return out


def time_fit(inputs: Path, repeats: int, warmup: int) -> dict[str, float | int]:
    """Fit times, and the time the fit takes to score 1,000 of the configs."""
    with np.load(inputs) as data:
        configs, runtimes, prior = data["configs"], data["runtimes"], data["prior"]
    for _ in range(warmup):
        adapt.fit(configs, runtimes, prior)
    seconds = [
        timed(lambda: adapt.fit(configs, runtimes, prior)) for _ in range(repeats)
    ]
    fitted = adapt.fit(configs, runtimes, prior)
    batch, batch_prior = configs[:RANKED], prior[:RANKED]
    scoring = [timed(lambda: fitted.score(batch, batch_prior)) for _ in range(repeats)]
    return {**spans(seconds), "score_1000_p50_ms": 1000.0 * median(scoring)}


def feed(
    session: TuningSession,
    graph: PreparedGraph,
    configs: Any,
    runtimes: Any,
    batch: int = 500,
) -> int:
    stored = 0
    for i in range(0, len(configs), batch):
        answer = session.feedback(
            graph, runtimes[i : i + batch], configs=configs[i : i + batch]
        )
        stored += answer.stored
    return stored


def fits(url: str) -> float:
    """Fits the service has run so far (its /metrics fit-duration histogram count)."""
    text = httpx.get(url + "/metrics", timeout=10.0).text
    name = "costmodel_adaptation_fit_duration_seconds_count"
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name)
    )


def rank_timing(
    session: TuningSession,
    url: str,
    graph: PreparedGraph,
    configs: npt.NDArray[np.float32],
    measured: int,
    repeats: int,
    warmup: int,
) -> dict[str, Any]:
    """First (refitting) request, then ABBA-interleaved adapted and prior requests;
    counts the fits the service ran during them (0: the cached fit served them)."""
    first = timed(lambda: session.rank(graph, configs))
    fits_before = fits(url)
    modes = {"adapted": True, "prior": False}
    for _ in range(warmup):
        for flag in modes.values():
            session.rank(graph, configs, adapt=flag)
    seconds: dict[str, list[float]] = {name: [] for name in modes}
    used: set[int] = set()
    for i in range(repeats):
        order = list(modes) if i % 2 == 0 else list(reversed(modes))
        for name in order:
            start = time.perf_counter()
            result = session.rank(graph, configs, adapt=modes[name])
            seconds[name].append(time.perf_counter() - start)
            if name == "adapted":
                used.add(result.adapted)
    if used != {measured}:
        raise RuntimeError(f"adapted requests used {used} measurements, not {measured}")
    refits = fits(url) - fits_before
    a, p = spans(seconds["adapted"]), spans(seconds["prior"])
    ratio = float(a["p50_ms"]) / float(p["p50_ms"])
    return {
        "configs": len(configs),
        "measurements": measured,
        "first_request_refit_ms": 1000.0 * first,
        "adapted": a,
        "prior": p,
        "fits_during_timed_requests": refits,
        "ratio_p50": ratio,
        "goal_ratio": RANK_RATIO_GOAL,
        "met": ratio <= RANK_RATIO_GOAL,
    }


def feedback_timing(
    urls: Mapping[str, str], model: str, sample: Sample, repeats: int, warmup: int
) -> dict[str, Any]:
    """64-row feedback requests, interleaved across the services in ``urls``."""
    graph = prepare_graph(sample)
    order = np.random.default_rng(1).permutation(sample.num_configs)
    clients = {db: CostModelClient(url, timeout=120.0) for db, url in urls.items()}
    try:
        sessions = {db: c.session(model) for db, c in clients.items()}
        seconds: dict[str, list[float]] = {db: [] for db in urls}
        for i in range(warmup + repeats):
            at = np.resize(order, (i + 1) * FEEDBACK_BATCH)[-FEEDBACK_BATCH:]
            dbs = list(urls) if i % 2 == 0 else list(urls)[::-1]
            for db in dbs:
                start = time.perf_counter()
                sessions[db].feedback(
                    graph, sample.runtimes[at], configs=sample.configs[at]
                )
                if i >= warmup:
                    seconds[db].append(time.perf_counter() - start)
    finally:
        for c in clients.values():
            c.close()
    return {
        "rows_per_request": FEEDBACK_BATCH,
        **{db: spans(s) for db, s in seconds.items()},
    }


def adapted_rank(
    client: CostModelClient,
    url: str,
    model: str,
    sample: Sample,
    plan: Any,
    workdir: Path,
) -> dict[str, Any]:
    """Fit timing in process and rank timing over HTTP, on the same 2,000 configs."""
    graph = prepare_graph(sample)
    configs, runtimes = synthetic_configs(sample)
    session = client.session(model, target=TIMING_TARGET)
    scores = session.rank(graph, configs, adapt=False).scores
    assert scores is not None
    prior = np.asarray(scores, np.float64)
    fit = fit_timing(configs, runtimes, prior, plan.fit_repeats, plan.warmup, workdir)
    stored = feed(session, graph, configs, runtimes)
    ranked = sample.configs[:RANKED]
    rank = rank_timing(
        session, url, graph, ranked, len(configs), plan.rank_repeats, plan.warmup
    )
    return {"fit": fit, "rank": {**rank, "feedback_stored": stored}}


def main() -> None:
    """``python -m xla_costmodel.studies.learning_timing INPUTS.npz REPEATS WARMUP``: the fit
    timing of ``fit_timing``, as JSON on stdout."""
    inputs, repeats, warmup = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(time_fit(inputs, repeats, warmup)))


if __name__ == "__main__":
    main()
