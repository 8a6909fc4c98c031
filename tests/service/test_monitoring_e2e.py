"""End to end with real parts: Debian's Prometheus scrapes a real ``costmodel serve
--workers 2`` every second and evaluates deploy/monitoring/rules.yml; after some ranks
and feedback, the recording rules' series are read back through Prometheus' HTTP API.
Two workers, because the fleet figures must not be summed over them."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from servicekit import program

from xla_costmodel.harness import ServiceServer
from xla_costmodel.studies.prometheus import PrometheusServer
from xla_costmodel.tpugraphs import xla_cpu2

pytestmark = pytest.mark.slow
# (best / default) of each tuned program on target cpu-a: the gain is 1 / their
# geometric mean. cpu-b's program is measured without its default: not tuned.
RATIOS = (0.8, 0.5, 0.9)


@pytest.fixture
def serve(tmp_path: Path, model_dir: Path) -> Iterator[ServiceServer]:
    env = {
        "TMPDIR": str(tmp_path),  # the workers' metrics directory
        "COSTMODEL_DATA_DIR": str(tmp_path / "data"),
        "COSTMODEL_FLEET_REFRESH_S": "0.5",
    }
    costmodel = str(Path(sys.executable).with_name("costmodel"))
    argv = [
        costmodel,
        "serve",
        "--workers",
        "2",
        "--model-dir",
        str(model_dir),
        "--models",
        "xla_cpu",
    ]
    server = ServiceServer(tmp_path, env, argv=argv)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def prometheus(tmp_path: Path, serve: ServiceServer) -> Iterator[PrometheusServer]:
    with PrometheusServer(tmp_path, [f"127.0.0.1:{serve.port}"], 1.0) as prom:
        yield prom


def rank_and_measure(
    client: httpx.Client, seed: int, target: str, ratio: float | None
) -> None:
    """Rank 4 option sets of a program, then feed back their runtimes as ``costmodel
    tune`` does: the default (row 0) included, unless ``ratio`` is None."""
    rows = xla_cpu2.sample(4, seed=seed)
    body = {"model": "xla_cpu", "graph": program(seed), "configs": rows.tolist()}
    assert client.post("/v1/rank", json=body).status_code == 200
    runtimes = [10_000, 11_000, 12_000, 10_000 * (ratio or 1)]
    if ratio is None:
        rows, runtimes = rows[1:], runtimes[1:]
    feedback = {
        **body,
        "configs": rows.tolist(),
        "target": target,
        "runtimes_ns": [int(r) for r in runtimes],
    }
    answer = client.post("/v1/feedback", json=feedback)
    assert answer.status_code == 200, answer.text


def until(
    prom: PrometheusServer, expr: str, ok: Callable[[float], bool] = math.isfinite
) -> list[dict[str, Any]]:
    """``expr``'s samples once there are some and ``ok`` holds for each (30 s)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = prom.query(expr)
        if found and all(ok(float(s["value"][1])) for s in found):
            return found
        time.sleep(0.5)
    pytest.fail(f"{expr}: no acceptable series within 30 s: {prom.query(expr)}")


def value(samples: list[dict[str, Any]]) -> float:
    (sample,) = samples
    return float(sample["value"][1])


def test_prometheus_records_the_rules_from_a_real_service(
    serve: ServiceServer, prometheus: PrometheusServer
) -> None:
    until(prometheus, 'up{job="costmodel"}', lambda up: up == 1)
    with httpx.Client(base_url=serve.url, timeout=30) as client:
        for seed, ratio in enumerate(RATIOS):
            rank_and_measure(client, seed, "cpu-a", ratio)
        rank_and_measure(client, 10, "cpu-b", None)
        expected = 1 / math.prod(RATIOS) ** (1 / len(RATIOS))
        gain = 'costmodel:fleet_gain:max{model="xla_cpu", target="cpu-a"}'
        until(prometheus, gain, lambda g: g == pytest.approx(expected))
        # rate() needs a counter to move between two scrapes: rank again.
        for seed in range(3):
            rank_and_measure(client, seed, "cpu-a", RATIOS[seed])
        fleet = client.get("/v1/targets").json()

    tuned = 'costmodel:fleet_graphs_tuned:max{model="xla_cpu", target="%s"}'
    # cpu-b's measurement may land after the refresh that gave cpu-a its gain: wait
    # for a refresh (and a scrape) that has seen it, then read both.
    until(prometheus, tuned % "cpu-b", lambda n: n == 0)
    assert value(prometheus.query(tuned % "cpu-a")) == 3  # once, not once per worker
    measured = 'costmodel:fleet_measurements:max{model="xla_cpu", target="cpu-a"}'
    until(prometheus, measured, lambda n: n == 24)
    median = 'costmodel:fleet_best_over_default:p50{model="xla_cpu", target="cpu-a"}'
    assert 0.7 <= value(prometheus.query(median)) <= 0.8  # 0.8's bucket is (0.7, 0.8]
    by_target = {t["target"]: t for t in fleet["targets"]}
    assert by_target["cpu-a"]["gain"] == pytest.approx(expected)

    # Traffic, latency, errors and resources, recorded from the same scrapes.
    rate = until(prometheus, 'costmodel:requests:rate5m{route="/v1/rank"}', bool)
    assert {s["metric"]["status"] for s in rate} == {"200"}
    p99 = 'costmodel:request_duration_seconds:p99_5m{route="/v1/rank", model="xla_cpu"}'
    assert 0 < value(until(prometheus, p99)) < 10
    errors = until(prometheus, "costmodel:request_errors:ratio_rate5m")
    assert value(errors) == 0
    assert 0 < value(until(prometheus, "costmodel:memory_used:ratio")) < 1
    tau = until(prometheus, "costmodel:online_kendall_tau:avg")
    assert {s["metric"]["version"] for s in tau} == {"1"}
    serving = prometheus.query("costmodel:model_serving:max")
    assert [(s["metric"]["model"], s["metric"]["version"]) for s in serving] == [
        ("xla_cpu", "1"),
    ]
    # Nothing is wrong, so no alert fires (pending ones would need minutes).
    assert prometheus.query('ALERTS{alertstate="firing"}') == []
