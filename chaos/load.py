"""The load of a chaos run: client threads that rank and send feedback, and what they
saw.

Every client is a thread with its own ``CostModelClient`` (its own connection pool and
retry policy, an ``Idempotency-Key`` per feedback call), looping rank -> feedback on
the top configs until told to stop. Threads, not processes: the run measures what the
service does under faults, not the client's own throughput, and the recorder must see
every HTTP attempt. Each call is counted in the phase that was current when it started.

Two levels are recorded. *Calls* are what an autotuner sees (one ``client.rank``,
retries included): requests, errors, latency. *Attempts* are single HTTP exchanges, seen
by a counting transport under the client: the 503s and whether they carried
``Retry-After``, which the client's retries otherwise hide.

Every feedback row gets a runtime no other row of the run has (``Ledger``), so a row
acknowledged by the service can be looked up in the database afterwards by its value.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import httpx
import numpy as np

from xla_costmodel.bench.data import fresh_copy
from xla_costmodel.bench.timing import percentile
from xla_costmodel.clients import (
    DEFAULT_LIMITS,
    CostModelClient,
    CostModelError,
    PreparedGraph,
    RankResult,
    RetryPolicy,
    prepare_graph,
)
from xla_costmodel.tpugraphs.arrays import Graph

T = TypeVar("T")
# The first runtime handed out; every feedback row of the run gets the next integer.
RUNTIME_BASE_NS = 1_000_000


@dataclass
class PhaseStats:
    """What the clients saw while one phase was current."""

    name: str
    latencies_ms: list[float] = field(default_factory=list)
    calls: Counter[str] = field(default_factory=Counter)  # op -> calls
    errors: Counter[str] = field(default_factory=Counter)  # error kind -> calls
    versions: Counter[str] = field(default_factory=Counter)  # model_version of ranks
    tiers: Counter[str] = field(default_factory=Counter)  # where ranks' embeddings were
    server: dict[str, float] = field(default_factory=dict)  # server metrics, deltas
    statuses: Counter[int] = field(default_factory=Counter)  # per HTTP attempt
    retry_after_503: int = 0
    transport_errors: int = 0
    fault: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        def ms(q: float) -> float | None:
            value = percentile(self.latencies_ms, q)
            return None if value != value else round(value, 2)  # NaN: no success

        other_5xx = sum(n for s, n in self.statuses.items() if s >= 500 and s != 503)
        return {
            "name": self.name,
            "requests": sum(self.calls.values()),
            "errors": sum(self.errors.values()),
            "p50_ms": ms(50),
            "p99_ms": ms(99),
            "503s": self.statuses[503],
            "retry_after": self.retry_after_503,
            "500s": self.statuses[500],  # the service never answers 500
            "other_5xx": other_5xx,  # 500s, and 502s from a proxy (Ray Serve)
            "http_attempts": sum(self.statuses.values()) + self.transport_errors,
            "transport_errors": self.transport_errors,
            "calls": dict(self.calls),
            "error_kinds": dict(self.errors),
            "rank_versions": dict(self.versions),
            "rank_cache": dict(self.tiers),
            "server": self.server,
            "seconds": round(self.seconds, 2),
            "fault": self.fault,
        }


class Recorder:
    """Thread-safe per-phase counters; ``begin(name)`` makes a phase current."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.phases: list[PhaseStats] = []

    def begin(self, name: str) -> PhaseStats:
        with self._lock:
            self.phases.append(PhaseStats(name))
            return self.phases[-1]

    @property
    def current(self) -> PhaseStats:
        with self._lock:
            return self.phases[-1]

    def call(
        self, phase: PhaseStats, op: str, ms: float, error: str | None, result: Any
    ) -> None:
        with self._lock:
            phase.calls[op] += 1
            if error is None:
                phase.latencies_ms.append(ms)
            else:
                phase.errors[error] += 1
            if isinstance(result, RankResult):
                phase.versions[str(result.model_version)] += 1
                phase.tiers[str(result.cache)] += 1

    def attempt(self, status: int | None, retry_after: bool = False) -> None:
        with self._lock:
            phase = self.phases[-1]
            if status is None:
                phase.transport_errors += 1
                return
            phase.statuses[status] += 1
            phase.retry_after_503 += int(status == 503 and retry_after)


class CountingTransport(httpx.BaseTransport):
    """The client's own transport, with every attempt reported to the recorder."""

    def __init__(self, recorder: Recorder) -> None:
        self.inner = httpx.HTTPTransport(limits=DEFAULT_LIMITS, retries=0)
        self.recorder = recorder

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = self.inner.handle_request(request)
        except httpx.TransportError:
            self.recorder.attempt(None)
            raise
        self.recorder.attempt(response.status_code, "retry-after" in response.headers)
        return response

    def close(self) -> None:
        self.inner.close()


class Ledger:
    """Unique runtimes for feedback rows, and the rows the service acknowledged."""

    def __init__(self) -> None:
        self._next = itertools.count(RUNTIME_BASE_NS)
        self._lock = threading.Lock()
        self.acknowledged_calls = 0
        self.acknowledged: list[int] = []  # runtimes of acknowledged rows
        self.short_answers = 0  # acknowledged with ``stored`` != rows sent

    def reserve(self, n: int) -> list[int]:
        with self._lock:
            return [next(self._next) for _ in range(n)]

    def acknowledge(self, runtimes: list[int], stored: int) -> None:
        with self._lock:
            self.acknowledged_calls += 1
            self.acknowledged.extend(runtimes)
            self.short_answers += int(stored != len(runtimes))


class FreshGraphs:
    """Graphs the service has never seen (``data.fresh_copy``: a new graph id, the
    same work), as autotuners bring new kernels: each one is a cache miss that goes
    to Redis and then to the encoder. ``enabled`` is cleared for the soak, whose
    RSS would otherwise grow by the (bounded) cache filling up."""

    def __init__(self) -> None:
        self._count = itertools.count()
        self._lock = threading.Lock()
        self.enabled = True

    def make(self, graph: Graph) -> PreparedGraph:
        with self._lock:
            k = next(self._count)
        return prepare_graph(fresh_copy(graph, 1000 + k))


@dataclass(frozen=True)
class Workload:
    """Real tile graphs, each with a pool of config rows, and the request sizes."""

    model: str
    raw: list[Graph]
    graphs: list[PreparedGraph]  # raw, prepared once (the hot graphs)
    pools: list[np.ndarray]
    fresh: FreshGraphs = field(default_factory=FreshGraphs)
    fresh_every: int = 4  # every n-th rank of a client is of a fresh graph
    batch: int = 16  # configs per rank
    feedback_rows: int = 2  # the top configs "measured" after each rank
    rank_deadline_s: float = 15.0
    # Long enough to ride out a database restart (503 feedback_unavailable).
    feedback_deadline_s: float = 30.0
    token: str | None = None  # the writer's (the server requires one)


# Retry-After is honoured but capped, so a phase of a few seconds still sees clients
# come back (the service asks 5 s after feedback_unavailable); more attempts than the
# default so a short outage is ridden out rather than reported as an error.
CHAOS_RETRY = RetryPolicy(max_attempts=8, backoff_base=0.05, retry_after_max=1.0)


def error_kind(exc: Exception) -> str:
    if isinstance(exc, CostModelError):
        parts = [type(exc).__name__, str(exc.status or ""), exc.code or ""]
        return ":".join(p for p in parts if p)
    return f"unexpected:{type(exc).__name__}"


class Crew:
    """N client threads over one workload; ``stop()`` lets each finish its call."""

    def __init__(
        self, url: str, workload: Workload, recorder: Recorder, ledger: Ledger
    ) -> None:
        self.url = url
        self.workload = workload
        self.recorder = recorder
        self.ledger = ledger
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self, clients: int, first_index: int = 0) -> None:
        for i in range(first_index, first_index + clients):
            t = threading.Thread(target=self._loop, args=(i,), daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout_s: float = 90.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._threads):
            raise RuntimeError("chaos clients did not stop in time")

    def _loop(self, index: int) -> None:
        w = self.workload
        rng = np.random.default_rng(index)
        transport = CountingTransport(self.recorder)
        with CostModelClient(
            self.url,
            timeout=10.0,
            retry=CHAOS_RETRY,
            transport=transport,
            token=w.token or "",
        ) as client:
            for i in itertools.count(index):
                if self._stop.is_set():
                    return
                j = i % len(w.graphs)
                graph, pool = w.graphs[j], w.pools[j]
                if w.fresh.enabled and i % w.fresh_every == 0:
                    graph = w.fresh.make(w.raw[j])
                rows = pool[rng.choice(pool.shape[0], size=w.batch, replace=False)]
                ranked = self._timed(
                    "rank",
                    partial(
                        client.rank, w.model, graph, rows, deadline=w.rank_deadline_s
                    ),
                )
                if ranked is None:
                    continue
                top = list(ranked.top_k[: w.feedback_rows])
                runtimes = self.ledger.reserve(len(top))
                answer = self._timed(
                    "feedback",
                    partial(
                        client.feedback,
                        w.model,
                        graph,
                        runtimes,
                        configs=rows[top],
                        deadline=w.feedback_deadline_s,
                    ),
                )
                if answer is not None:
                    self.ledger.acknowledge(runtimes, answer.stored)

    def _timed(self, op: str, call: Callable[[], T]) -> T | None:
        phase = self.recorder.current
        t0 = time.perf_counter()
        try:
            result = call()
        except Exception as exc:  # every failure is a figure of the run, never fatal
            self.recorder.call(phase, op, 0.0, error_kind(exc), None)
            return None
        ms = 1000.0 * (time.perf_counter() - t0)
        self.recorder.call(phase, op, ms, None, result)
        return result
