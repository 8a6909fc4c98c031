"""The load phase: N concurrent clients rank configs on a mix of cached graphs.

Each client is its own process with its own ``CostModelClient`` (its own connection),
like N autotuners would be. One event loop driving N async clients was tried first: a
client's latency then included the other clients' CPU-bound encoding and decoding in
that loop, which doubled the measured p99. Every client loops until the shared start
time plus the phase's duration, or until its share of the request cap; each request
takes a random 1,000-config slice of its graph's pool. Latencies are end to end
through the real client; everything is on loopback.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from xla_costmodel.bench.timing import percentile

STARTUP_TIMEOUT_S = 60.0  # spawning N interpreters on a busy 2-core machine


@dataclass(frozen=True)
class LoadSpec:
    clients: int
    seconds: float
    configs: int  # per request
    max_requests: int  # across all clients


@dataclass(frozen=True)
class LoadTarget:
    """What every client process needs to rebuild the same workload by itself."""

    url: str
    model: str
    pool: int  # synthetic configs per graph (same seed as the parent: same graph ids)
    data_root: Path


@dataclass
class LoadResult:
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def requests(self) -> int:
        return len(self.latencies_s) + self.errors

    def add(self, latencies: list[float], kinds: dict[str, int]) -> None:
        self.latencies_s.extend(latencies)
        for kind, n in kinds.items():
            self.errors += n
            self.error_kinds[kind] = self.error_kinds.get(kind, 0) + n

    def figures(self, spec: LoadSpec) -> dict[str, float | int]:
        ms = [1000.0 * s for s in self.latencies_s]
        return {
            "load_clients": spec.clients,
            "load_seconds": round(self.elapsed_s, 3),
            "load_requests": self.requests,
            "load_errors": self.errors,
            "load_p50_ms": percentile(ms, 50),
            "load_p99_ms": percentile(ms, 99),
            "load_rps": len(ms) / self.elapsed_s if self.elapsed_s else 0.0,
        }


def _client(
    index: int, target: LoadTarget, spec: LoadSpec, ready: Any, start: Any, out: Any
) -> None:
    """One client process: build the workload, say ready, wait for the start, loop."""
    from xla_costmodel.bench.data import tile_workload
    from xla_costmodel.clients import CostModelClient, CostModelError, prepare_graph

    tile = tile_workload(pool=target.pool, root=target.data_root)
    graphs = [
        (prepare_graph(s.graph), c)
        for s, c in zip(tile.samples, tile.configs, strict=True)
    ]
    rng = np.random.default_rng(1000 + index)
    latencies: list[float] = []
    kinds: dict[str, int] = {}
    cap = max(1, spec.max_requests // spec.clients)
    with CostModelClient(target.url, timeout=30.0) as client:
        ready.put(index)
        deadline = start.get(timeout=STARTUP_TIMEOUT_S) + spec.seconds
        i = index
        while time.time() < deadline and len(latencies) + sum(kinds.values()) < cap:
            graph, pool = graphs[i % len(graphs)]
            i += 1
            first = int(rng.integers(0, max(1, pool.shape[0] - spec.configs)))
            t0 = time.perf_counter()
            try:
                client.rank(
                    target.model,
                    graph,
                    pool[first : first + spec.configs],
                    deadline=10.0,
                )
            except CostModelError as exc:
                kinds[type(exc).__name__] = kinds.get(type(exc).__name__, 0) + 1
                continue
            latencies.append(time.perf_counter() - t0)
    out.put((latencies, kinds, time.time()))


def run_load(target: LoadTarget, spec: LoadSpec) -> LoadResult:
    """Drive the load; the graphs must already be cached by the service."""
    ctx = mp.get_context("spawn")
    ready, start, out = ctx.Queue(), ctx.Queue(), ctx.Queue()
    procs = [
        ctx.Process(
            target=_client, args=(i, target, spec, ready, start, out), daemon=True
        )
        for i in range(spec.clients)
    ]
    result = LoadResult()
    try:
        for p in procs:
            p.start()
        for _ in procs:
            _get(ready, procs, STARTUP_TIMEOUT_S)
        t0 = time.time() + 0.2
        for _ in procs:
            start.put(t0)
        last = t0
        for _ in procs:
            latencies, kinds, finished = _get(out, procs, spec.seconds + 60.0)
            result.add(latencies, kinds)
            last = max(last, finished)
        result.elapsed_s = last - t0
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    return result


def _get(q: Any, procs: list[Any], timeout_s: float) -> Any:
    """The next message, failing fast if a client process died instead of sending it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return q.get(timeout=0.25)
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                raise RuntimeError("a load client process failed") from None
    raise RuntimeError(f"load clients gave no answer in {timeout_s:.0f} s")
