"""``Metrics`` in prometheus-client's multiprocess mode, with real processes: counters
sum over workers (dead ones included); a worker that died without its lifespan's
exit stops counting in the live gauges. Each process is a fresh interpreter, since
prometheus_client picks the mode when it is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from servicekit import metric

WORKER = """
import os, sys
from xla_costmodel.service.metrics import Metrics
m = Metrics()
m.shaping.ranking_adapted("tile", False)
m.http.inflight.inc()
if sys.argv[1] == "crash":
    os._exit(1)  # no lifespan exit: its gauges stay in the directory
if sys.argv[1] == "render":
    sys.stdout.write(m.render().decode())
m.http.inflight.dec()
m.close()
"""


def worker(path: Path, mode: str) -> str:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(path)}
    done = subprocess.run(
        [sys.executable, "-c", WORKER, mode], env=env, capture_output=True, text=True
    )
    assert done.returncode == (1 if mode == "crash" else 0), done.stderr
    return done.stdout


def test_counters_sum_over_workers_and_dead_workers_leave_the_gauges(
    tmp_path: Path,
) -> None:
    worker(tmp_path, "exit")
    worker(tmp_path, "crash")
    assert any(tmp_path.glob("gauge_livesum_*.db"))  # the crashed worker's
    text = worker(tmp_path, "render")
    rankings = metric(text, "costmodel_rankings_total", model="tile", adapted="false")
    assert rankings == 3
    # Only the rendering worker's request is in flight: the crashed one is gone.
    assert metric(text, "costmodel_inflight_requests") == 1
    # The crashed worker's were swept while rendering; the others left at exit.
    assert not list(tmp_path.glob("gauge_live*.db"))
    assert len(list(tmp_path.glob("counter_*.db"))) == 3  # their counts stay
