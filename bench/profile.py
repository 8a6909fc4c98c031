"""``python -m xla_costmodel.bench.profile``: where a request's time goes, server and client.

Starts Redis and the service like the benchmark does, drives one request type in a
loop through the real client (``http-binary``, ``http-json``, ``layout-cached``,
``layout-cold``), samples the server with py-spy (``pip install py-spy``) and the client
with pyinstrument (``pip install pyinstrument``), and writes to ``--out``:

* ``profile_<target>_server.svg``: the server's flame graph;
* ``profile_<target>_server.txt``: its busiest functions (inclusive and self), idle
  waits left out;
* ``profile_<target>_client.txt``: the client's call tree.

Both profilers are development tools, not dependencies of the harness.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from xla_costmodel.bench.data import fresh_copy, layout_sample, tile_workload
from xla_costmodel.bench.harness import Options, server_env
from xla_costmodel.bench.http_phase import Body, HttpRanker
from xla_costmodel.clients import CostModelClient, prepare_graph
from xla_costmodel.harness import RedisServer, ServiceServer

# Leaf functions of a thread that is waiting, not working.
IDLE_LEAVES = frozenset(
    {
        "select",
        "poll",
        "wait",
        "Runner.run",
        "_run_once",
        "Condition.wait",
        "EpollSelector.select",
        "Queue.get",
    }
)
# Files whose functions get an inclusive share: the project's, and FastAPI's request
# handling (body parsing, dependencies, response serialisation).
INCLUSIVE = (
    "service/",
    "clients/",
    "costmodel/",
    "tpugraphs/",
    "fastapi/routing.py",
    "fastapi/dependencies/",
)


def summarize(raw: Path, top: int = 40) -> str:
    """Shares of busy samples from py-spy's collapsed stacks: inclusive for the
    project's own functions, self for every function."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    busy = total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        total += count
        frames = stack.split(";")
        if not frames or frames[-1].split(" (")[0] in IDLE_LEAVES:
            continue
        busy += count
        for frame in {_short(f) for f in frames if _where(f).startswith(INCLUSIVE)}:
            inclusive[frame] += count
        own[_short(frames[-1])] += count
    lines = [f"{busy} busy of {total} samples (idle waits left out); % of busy"]
    for title, counter in (("inclusive", inclusive), ("self", own)):
        lines.append(f"--- {title}")
        lines += [
            f"{100 * n / max(busy, 1):6.1f}%  {k}" for k, n in counter.most_common(top)
        ]
    return "\n".join(lines) + "\n"


def _where(frame: str) -> str:
    return frame.partition(" (")[2]


def _short(frame: str) -> str:
    name, _, where = frame.partition(" (")
    return f"{name} ({where.split(':')[0].rsplit('/', 1)[-1]})" if where else name


def workload(target: str, url: str) -> Callable[[], object]:
    """The request to repeat, with its graph already cached where that is the point."""
    if target.startswith("http-"):
        tile = tile_workload(pool=10_000)
        graph = prepare_graph(tile.main.graph)
        ranker = HttpRanker(url, "tile")
        ranker.client.upload_graph("tile", graph)
        body: Body = "binary" if target == "http-binary" else "json"
        return lambda: ranker.rank(body, graph, tile.main_configs)
    sample = layout_sample()
    client = CostModelClient(url, timeout=120.0)
    batch = sample.configs[:64]
    if target == "layout-cached":
        graph = prepare_graph(sample.graph)
        client.upload_graph("layout", graph)
        return lambda: client.rank("layout", graph, batch)
    counter = iter(range(10**6))
    return lambda: client.rank(
        "layout", prepare_graph(fresh_copy(sample.graph, next(counter))), batch
    )


def _record_server(
    spy: str, pid: int, rate: int, seconds: float, raw: Path, svg: Path
) -> list[subprocess.Popen[bytes]]:
    """Two py-spy recorders on the server: raw stacks and a flame graph."""
    cmd = [spy, "record", "-p", str(pid), "-r", str(rate), "-d", str(int(seconds) + 1)]
    return [
        subprocess.Popen(
            [*cmd, "-f", fmt, "-o", str(path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for fmt, path in (("raw", raw), ("flamegraph", svg))
    ]


def profile(
    target: Annotated[
        str, typer.Argument(help="http-binary, http-json, layout-cached or layout-cold")
    ] = "http-binary",
    seconds: Annotated[float, typer.Option(help="Sampling time.")] = 10.0,
    out: Annotated[Path, typer.Option(help="Where the profiles go.")] = Path(
        "bench/results"
    ),
    rate: Annotated[int, typer.Option(help="py-spy samples per second.")] = 250,
) -> None:
    """Profile one request type: py-spy on the server, pyinstrument on the client."""
    from pyinstrument import Profiler

    spy = shutil.which("py-spy") or str(
        Path(__import__("sys").executable).parent / "py-spy"
    )
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"profile_{target}"
    with (
        tempfile.TemporaryDirectory() as tmp,
        RedisServer(Path(tmp)) as redis,
        ServiceServer(Path(tmp), server_env(Options(), redis.url)) as server,
    ):
        call = workload(target, server.url)
        for _ in range(3):
            call()
        raw = Path(tmp) / "server.txt"
        svg = stem.with_name(stem.name + "_server.svg")
        recorders = _record_server(spy, server.pid, rate, seconds, raw, svg)
        time.sleep(0.5)
        client_profile = Profiler(interval=0.001)
        client_profile.start()
        deadline, count = time.monotonic() + seconds, 0
        while time.monotonic() < deadline and count < 100_000:
            call()
            count += 1
        client_profile.stop()
        for recorder in recorders:
            recorder.wait(timeout=seconds + 30)
        stem.with_name(stem.name + "_server.txt").write_text(
            f"{target}: {count} requests in {seconds:.0f} s\n" + summarize(raw)
        )
        stem.with_name(stem.name + "_client.txt").write_text(
            client_profile.output_text(unicode=False, color=False)
        )
    typer.echo(f"{target}: {count} requests; profiles in {out}/profile_{target}_*")


if __name__ == "__main__":
    typer.run(profile)
