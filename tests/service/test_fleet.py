"""The fleet's tuning gain: computed from the stored measurements off the request
path, served as ``GET /v1/targets`` and as ``costmodel_fleet_*`` metrics with the
target labels capped."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import anyio
import httpx
import pytest
from servicekit import AppClient, metric, program

from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.fleet import OTHER, FleetGain, FleetSnapshot, summarise
from xla_costmodel.service.store.summary import GraphSummary
from xla_costmodel.tpugraphs import xla_cpu2

pytestmark = pytest.mark.anyio


async def tuned(
    client: httpx.AsyncClient, seed: int, target: str, runtimes: list[int]
) -> None:
    """Feedback as ``costmodel tune`` sends it: row 0 is XLA's default config."""
    rows = xla_cpu2.sample(len(runtimes), seed=seed).tolist()
    body = {
        "model": "xla_cpu",
        "graph": program(seed),
        "configs": rows,
        "runtimes_ns": runtimes,
        "target": target,
    }
    answer = await client.post("/v1/feedback", json=body)
    assert answer.status_code == 200, answer.text


async def refreshed(client: httpx.AsyncClient, programs: int) -> dict[str, Any]:
    """/v1/targets once the background refresh has seen ``programs`` graphs."""
    with anyio.fail_after(10):
        while True:
            body: dict[str, Any] = (await client.get("/v1/targets")).json()
            if sum(t["programs"] for t in body["targets"]) == programs:
                return body
            await anyio.sleep(0.05)


async def test_targets_and_metrics_follow_the_stored_measurements(
    make_client: AppClient,
) -> None:
    client = await make_client(
        models=["xla_cpu"], fleet_refresh_s=0.05, fleet_max_targets=1
    )
    before = (await client.get("/v1/targets")).json()
    assert before["targets"] == [] and "as_of" in before
    await tuned(client, 1, "cpu-a", [1000, 800, 1200])  # best/default 0.8
    await tuned(client, 2, "cpu-a", [500, 450, 500, 490])  # 0.9
    await tuned(client, 3, "cpu-b", [700, 600])  # 600/700
    body = await refreshed(client, programs=3)

    assert datetime.fromisoformat(body["as_of"])
    by_target = {t["target"]: t for t in body["targets"]}
    a, b = by_target["cpu-a"], by_target["cpu-b"]
    assert (a["programs"], a["tuned"], a["measurements"]) == (2, 2, 7)
    assert a["gain"] == pytest.approx(math.sqrt(1 / 0.8 * 1 / 0.9))
    assert (b["tuned"], b["gain"]) == (1, pytest.approx(700 / 600))
    assert {t["collection"] for t in body["targets"]} == {"xla_cpu"}

    # One target label per model here: cpu-a has most measurements, cpu-b is other.
    text = (await client.get("/metrics")).text
    labels = {"model": "xla_cpu", "target": "cpu-a"}
    assert metric(text, "costmodel_fleet_graphs_tuned", **labels) == 2
    assert metric(text, "costmodel_fleet_measurements", **labels) == 7
    assert metric(text, "costmodel_fleet_gain", **labels) == pytest.approx(a["gain"])
    bucket = "costmodel_fleet_best_over_default_bucket"
    assert metric(text, bucket, le="0.8", **labels) == 1
    assert metric(text, bucket, le="0.9", **labels) == 2
    assert metric(text, bucket, le="+Inf", **labels) == 2
    assert metric(text, "costmodel_fleet_graphs", model="xla_cpu", target=OTHER) == 1
    assert 'target="cpu-b"' not in text
    assert metric(text, "costmodel_ready") == 1


def test_targets_past_the_cap_are_merged_into_other() -> None:
    rows = [
        GraphSummary("m", "xla_cpu", target, f"g{i}", n, best, default)
        for i, (target, n, best, default) in enumerate(
            [
                ("a", 10, 80, 100),
                ("b", 5, 50, 100),
                ("c", 3, 90, None),
                ("d", 1, 1, 1),
            ]
        )
    ]
    snapshot = FleetSnapshot(None, tuple(summarise(rows)))
    capped = {t.target: t for t in snapshot.capped(1)}
    assert set(capped) == {"a", OTHER}
    other = capped[OTHER]
    assert (other.programs, other.measurements, other.tuned) == (3, 9, 2)
    assert other.ratios == (0.5, 1.0) and other.gain == pytest.approx(math.sqrt(2))
    assert len(snapshot.capped(10)) == 4
    # A client's own target "other" never makes a second series of that name.
    named_other = FleetSnapshot(
        None,
        tuple(summarise([*rows, GraphSummary("m", "xla_cpu", OTHER, "g9", 2, 9, 10)])),
    )
    assert [t.target for t in named_other.capped(1)] == ["a", OTHER]
    assert named_other.capped(1)[1].programs == 4
    assert [t.target for t in named_other.capped(10)] == ["a", "b", "c", "d", OTHER]


class Events:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def store_error(self, op: str) -> None:
        self.errors.append(op)


async def test_a_failed_refresh_keeps_the_last_snapshot_and_is_counted() -> None:
    events = Events()
    # Nothing listens on port 1: connecting is refused at once.
    fleet = FleetGain(Database("postgresql://costmodel@127.0.0.1:1/none"), events)
    assert await fleet.refresh() is False
    assert fleet.snapshot.as_of is None and events.errors == ["fleet_summary"]
