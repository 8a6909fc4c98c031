"""Throughput under N concurrent clients, for our service, KServe and raw onnxruntime.

HTTP clients are processes (one connection each, like N autotuners), started once and
reused for every (server, batch size) step: spawning interpreters costs seconds on 2
cores. Each step, every client sends the same batch in a loop until a shared deadline;
the figure is configs answered per second of the step. Raw onnxruntime is N threads
sharing one ``InferenceSession`` in this process (``run`` releases the GIL): the limit
of the model itself with N callers.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self

import numpy as np

from xla_costmodel.bench.load import STARTUP_TIMEOUT_S, _get
from xla_costmodel.tpugraphs.arrays import Graph

Server = Literal["ours", "kserve"]


@dataclass(frozen=True)
class Step:
    server: Server
    url: str
    configs: int
    seconds: float


def _client(
    index: int,
    graph: Graph,
    embedding: np.ndarray,
    pool: np.ndarray,
    inbox: Any,
    out: Any,
) -> None:
    """One client process: run the steps it is sent until it gets ``None``."""
    from xla_costmodel.bench.peer_kserve import KServeRanker
    from xla_costmodel.clients import CostModelClient, prepare_graph

    prepared = prepare_graph(graph)
    clients: dict[str, Any] = {}
    out.put(("ready", index))
    while (step := inbox.get()) is not None:
        key = f"{step.server} {step.url}"
        if key not in clients:
            clients[key] = (
                KServeRanker(step.url)
                if step.server == "kserve"
                else CostModelClient(step.url, timeout=60.0)
            )
        call = _caller(step, clients[key], prepared, embedding, pool[: step.configs])
        for _ in range(20):  # warm: connection, first-use costs; a just-started
            try:  # second worker may still answer 503 for a moment
                call()
                break
            except Exception:
                time.sleep(0.05)
        out.put(("warm", index))
        start_at = inbox.get()
        while time.time() < start_at:
            time.sleep(0.001)
        done = errors = 0
        while time.time() < start_at + step.seconds:
            try:
                call()
                done += 1
            except Exception:  # counted, reported as errors
                errors += 1
        out.put((done, errors, time.time()))
    for client in clients.values():
        client.close()


def _caller(
    step: Step, client: Any, graph: Any, embedding: np.ndarray, configs: np.ndarray
) -> Callable[[], object]:
    if step.server == "kserve":
        return lambda: client.rank(embedding, configs)
    return lambda: client.rank("tile", graph, configs, deadline=60.0)


class ClientPool:
    """N client processes; ``rate(step)`` runs one step on all of them."""

    def __init__(
        self, clients: int, graph: Graph, embedding: np.ndarray, pool: np.ndarray
    ) -> None:
        ctx = mp.get_context("spawn")
        self.out = ctx.Queue()
        self.inboxes = [ctx.Queue() for _ in range(clients)]
        args = (graph, embedding, pool)
        self.procs = [
            ctx.Process(target=_client, args=(i, *args, q, self.out), daemon=True)
            for i, q in enumerate(self.inboxes)
        ]

    def __enter__(self) -> Self:
        try:
            for p in self.procs:
                p.start()
            for _ in self.procs:
                _get(self.out, self.procs, STARTUP_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        return self

    def rate(self, step: Step) -> tuple[float, int]:
        """Configs per second across all clients, and the number of failed calls."""
        for q in self.inboxes:
            q.put(step)
        # Warm-up (connection, first request) on every client before the clock starts:
        # on a loaded machine it can take longer than a whole step.
        for _ in self.procs:
            _get(self.out, self.procs, STARTUP_TIMEOUT_S)
        start_at = time.time() + 0.1
        for q in self.inboxes:
            q.put(start_at)
        done = errors = 0
        last = start_at
        for _ in self.procs:
            n, e, finished = _get(self.out, self.procs, step.seconds + 60.0)
            done, errors, last = done + n, errors + e, max(last, finished)
        return done * step.configs / (last - start_at), errors

    def close(self) -> None:
        for q, p in zip(self.inboxes, self.procs, strict=True):
            if p.is_alive():
                q.put(None)
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def raw_rate(
    score: Callable[[np.ndarray], object],
    configs: np.ndarray,
    threads: int,
    seconds: float,
) -> float:
    """Configs per second of ``score(configs)`` called by ``threads`` threads at once."""
    counts = [0] * threads
    deadline = time.monotonic() + seconds

    def loop(i: int) -> None:
        while time.monotonic() < deadline:
            score(configs)
            counts[i] += 1

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    started = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return float(sum(counts) * configs.shape[0] / (time.monotonic() - started))
