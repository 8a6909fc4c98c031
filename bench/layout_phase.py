"""An autotuner round on a real layout graph, through the service and the real client.

* cold: a graph id the service has never seen and an empty Redis, so the client's
  ``rank`` sends the graph inline with its first request (the service encodes it, then
  scores): what the first round of a tuning session costs;
* cached: the same request once the embedding is in the server's memory;
* redis hit: a second server that keeps no in-process cache, sharing the Redis, so
  every request finds the embedding in Redis only;
* all configs: every config of the graph in one request, cached.

Each round ranks a different slice of the graph's real configs, as a tuner would.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from xla_costmodel.bench.data import F32, fresh_copy
from xla_costmodel.bench.inproc import Budget
from xla_costmodel.bench.timing import Timings, time_calls
from xla_costmodel.clients import CostModelClient, PreparedGraph, prepare_graph
from xla_costmodel.harness import RedisServer
from xla_costmodel.tpugraphs.arrays import Graph, Sample


@dataclass
class LayoutRound:
    """One model on one graph: the prepared graph and a rotating supply of batches."""

    client: CostModelClient
    model: str
    graph: PreparedGraph
    configs: F32
    batch: int
    tiers: dict[str, dict[str, int]] = field(default_factory=dict)  # label: tier: n
    last_tier: str = ""
    _starts: itertools.cycle[int] | None = None

    def next_batch(self) -> F32:
        if self._starts is None:
            n = self.configs.shape[0]
            self._starts = itertools.cycle(
                range(0, max(1, n - self.batch + 1), self.batch)
            )
        start = next(self._starts)
        return self.configs[start : start + self.batch]

    def rank(
        self, label: str, graph: PreparedGraph | None = None, configs: F32 | None = None
    ) -> None:
        batch = self.next_batch() if configs is None else configs
        result = self.client.rank(
            self.model, graph or self.graph, batch, deadline=120.0
        )
        tier = f"{result.cache}+upload" if result.uploaded else str(result.cache)
        counts = self.tiers.setdefault(label, {})
        counts[tier] = counts.get(tier, 0) + 1
        self.last_tier = tier


def cold(
    round_: LayoutRound, sample: Sample, redis: RedisServer, budget: Budget
) -> Timings:
    """Each call ranks a never-seen copy of the graph, Redis flushed first (untimed).

    Timed: what the tuner's first round costs end to end: hashing the graph for its id
    and one rank request carrying the graph inline (the service encodes, then scores).
    One untimed cold call first warms the server's encoder session for this size.
    """
    copies = (fresh_copy(sample.graph, k) for k in itertools.count())
    pending: list[Graph] = []

    def setup() -> None:
        redis.flushall()
        pending.append(next(copies))

    def call() -> None:
        round_.rank("cold", prepare_graph(pending.pop()))

    return time_calls(call, budget.repeats, budget.seconds, warmup=1, setup=setup)


def cached(round_: LayoutRound, budget: Budget) -> Timings:
    round_.rank("warm")  # make sure this graph is cached in memory
    return time_calls(lambda: round_.rank("cached"), budget.repeats, budget.seconds)


def all_configs(round_: LayoutRound, budget: Budget) -> Timings:
    every = np.ascontiguousarray(round_.configs)
    return time_calls(
        lambda: round_.rank("all", configs=every),
        budget.repeats,
        budget.seconds,
    )


def redis_hits(round_: LayoutRound, budget: Budget, tries: int = 3) -> Timings:
    """On a server with no in-process cache, whose Redis already holds the embedding.

    Untimed first: this client's first rank carries the graph inline. Redis is
    best-effort (a write that outlasts the service's short Redis timeout on a loaded
    machine is dropped), so the warm-up repeats, at most ``tries`` times, until the
    embedding is read back from Redis; only then are Redis hits timed.
    """
    for _ in range(tries):
        round_.rank("redis warm-up")
        if round_.last_tier.startswith("redis"):
            break
    return time_calls(
        lambda: round_.rank("redis"), budget.repeats, budget.seconds, warmup=0
    )
