"""How much of each phase a mode runs. Sizes are fixed by the issue (10,000 tile
configs, 64 and 1,001 layout configs, 1,000 per load request); modes differ in repeats,
time caps and the load's duration, so quick and full report the same quantities."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from xla_costmodel.bench.data import NLP_GRAPH, SMALL_LAYOUT_GRAPH
from xla_costmodel.bench.fleet_phase import FleetPlan
from xla_costmodel.bench.inproc import Budget
from xla_costmodel.bench.load import LoadSpec

Mode = Literal["smoke", "quick", "full"]
SWEEP_SIZES = (1, 10, 100, 1_000, 10_000, 100_000)


@dataclass(frozen=True)
class Plan:
    mode: Mode
    tile_configs: int  # per request in the throughput phases
    raw: Budget
    torch: Budget
    http: Budget  # per body encoding
    sweep_sizes: tuple[int, ...]
    sweep: Budget  # per (series, size)
    encoder: Budget
    layout_graph: str  # under the shared data root
    layout_batch: int
    layout_cold: Budget
    layout_cached: Budget
    layout_redis: Budget
    layout_all: Budget
    load: LoadSpec
    # Ours vs KServe vs raw onnxruntime (peers_phase): sizes, latency repeats,
    # clients and seconds per (server, size) throughput step, workers-table sizes.
    peer_sizes: tuple[int, ...]
    peer_latency: Budget
    peer_clients: int
    peer_load_seconds: float
    worker_sizes: tuple[int, ...]
    # The shared-database phase (fleet_phase): statements, staleness, throughput.
    fleet: FleetPlan


FULL = Plan(
    mode="full",
    tile_configs=10_000,
    raw=Budget(50, 10.0),
    torch=Budget(50, 10.0),
    http=Budget(30, 20.0),
    sweep_sizes=SWEEP_SIZES,
    sweep=Budget(15, 8.0),
    encoder=Budget(7, 20.0),
    layout_graph=NLP_GRAPH,
    layout_batch=64,
    layout_cold=Budget(5, 30.0),
    layout_cached=Budget(30, 10.0),
    layout_redis=Budget(15, 10.0),
    layout_all=Budget(5, 30.0),
    load=LoadSpec(clients=8, seconds=60.0, configs=1_000, max_requests=100_000),
    peer_sizes=(1, 64, 1_000, 10_000),
    peer_latency=Budget(50, 4.0),
    peer_clients=8,
    peer_load_seconds=5.0,
    worker_sizes=(64, 10_000),
    fleet=FleetPlan(ranks=200, trials=20, rounds=3, seconds=5.0),
)

QUICK = replace(
    FULL,
    mode="quick",
    raw=Budget(15, 2.0),
    torch=Budget(15, 2.0),
    http=Budget(7, 3.0),
    sweep=Budget(3, 1.5),
    encoder=Budget(3, 3.0),
    layout_cold=Budget(3, 5.0),
    layout_cached=Budget(10, 2.0),
    layout_redis=Budget(5, 2.0),
    layout_all=Budget(2, 5.0),
    load=LoadSpec(clients=8, seconds=6.0, configs=1_000, max_requests=20_000),
    peer_latency=Budget(15, 1.5),
    peer_load_seconds=1.5,
    fleet=FleetPlan(ranks=100, trials=20, rounds=2, seconds=1.5),
)

# Tiny sizes for the test suite: every phase and process, none of the waiting.
SMOKE = replace(
    QUICK,
    mode="smoke",
    tile_configs=500,
    raw=Budget(2, 0.5),
    torch=Budget(2, 0.5),
    http=Budget(2, 0.5),
    sweep_sizes=(1, 100),
    sweep=Budget(1, 0.5),
    encoder=Budget(1, 1.0),
    layout_graph=SMALL_LAYOUT_GRAPH,
    layout_batch=4,
    layout_cold=Budget(1, 1.0),
    layout_cached=Budget(2, 0.5),
    layout_redis=Budget(1, 0.5),
    layout_all=Budget(1, 1.0),
    load=LoadSpec(clients=2, seconds=0.5, configs=50, max_requests=40),
    peer_sizes=(1, 64),
    peer_latency=Budget(2, 0.5),
    peer_clients=2,
    peer_load_seconds=0.3,
    worker_sizes=(),
    fleet=FleetPlan(ranks=5, trials=3, rounds=1, seconds=0.3),
)

PLANS: dict[Mode, Plan] = {"full": FULL, "quick": QUICK, "smoke": SMOKE}
