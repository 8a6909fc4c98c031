"""The README's rendering of the monitoring: recorded series from a real run, plotted.

    python -m xla_costmodel.studies.monitoring [--seconds 420] [--programs 12]

Starts ``costmodel``'s app under uvicorn and Debian's Prometheus (scraping it every
second and evaluating ``deploy/monitoring/rules.yml``), then plays a fleet of tuners
against it: for each target of ``datasets/xla_cpu/<target>/`` (the CPUs the project
measured itself) and each of ``--programs`` programs, three rounds of ``costmodel
tune``'s protocol (rank the configs not measured yet, measure the two best and the
default, send them back), where "measure" looks the runtime up in the dataset's real
measurements. Then it reads the recording rules' series back through Prometheus'
HTTP API and plots them: ``studies/results/monitoring.png`` and ``.json`` (the
final ``GET /v1/targets``).

This is a simulation on real measurements, not a live tuning run: the runtimes are
the dataset's medians, so the fleet gain it shows is what the service's ranking finds
in three rounds on those programs.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from xla_costmodel import paths
from xla_costmodel.bench import require_harness

if TYPE_CHECKING:
    from xla_costmodel.studies.prometheus import PrometheusServer

DATASETS = paths.XLA_CPU_DATA  # from the repository root (make)
RESULTS = Path("studies/results")
ROUNDS, PER_ROUND = 3, 2


@dataclass(frozen=True)
class Program:
    target: str
    name: str
    graph: dict[str, Any]
    configs: np.ndarray[Any, Any]  # [C, 17], row 0 XLA's default
    runtimes: np.ndarray[Any, Any]  # [C] ns, the dataset's medians


def programs(per_target: int) -> list[Program]:
    """The first ``per_target`` programs (by name) of every measured target, the
    targets taking turns, so that they progress side by side."""
    folders = sorted(p for p in DATASETS.iterdir() if p.is_dir())
    files = [sorted(f.glob("*.npz"))[:per_target] for f in folders]
    turns = [
        path for i in range(per_target) for found in files for path in found[i : i + 1]
    ]
    return [load(path) for path in turns]


def load(path: Path) -> Program:
    with np.load(path) as data:
        graph = {
            k: data[k].tolist() for k in ("node_feat", "node_opcode", "edge_index")
        }
        return Program(
            path.parent.name,
            path.stem,
            graph,
            data["config_feat"],
            data["config_runtime"],
        )


def tune(client: httpx.Client, program: Program) -> None:
    """Three rounds of rank, measure the best two and the default, feed back."""
    left = list(range(1, len(program.configs)))
    for _ in range(ROUNDS):
        body = {
            "model": "xla_cpu",
            "graph": program.graph,
            "target": program.target,
            "configs": program.configs[left].tolist(),
        }
        ranked = client.post("/v1/rank", json=body).raise_for_status().json()
        picked = [left[i] for i in ranked["ranking"][:PER_ROUND]]
        left = [i for i in left if i not in picked]
        measured = [0, *picked]  # the default beside them, as tune measures it
        feedback = {
            **body,
            "configs": program.configs[measured].tolist(),
            "runtimes_ns": program.runtimes[measured].astype(int).tolist(),
        }
        client.post("/v1/feedback", json=feedback).raise_for_status()


def drive(url: str, fleet: list[Program], seconds: float) -> dict[str, Any]:
    """Tune every program, spread evenly over ``seconds``; the final /v1/targets."""
    pause = seconds / max(1, len(fleet))
    with httpx.Client(base_url=url, timeout=60) as client:
        started = time.monotonic()
        for i, program in enumerate(fleet):
            tune(client, program)
            time.sleep(max(0.0, started + (i + 1) * pause - time.monotonic()))
        time.sleep(5)  # a fleet refresh and a few scrapes after the last feedback
        return client.get("/v1/targets").raise_for_status().json()  # type: ignore[no-any-return]


PANELS = (
    ("Requests /s by route", "sum by (route) (costmodel:requests:rate5m)", "{route}"),
    (
        "Rank latency p50 / p99 (s)",
        'label_replace(costmodel:request_duration_seconds:p50_5m{route="/v1/rank"}, "q", "p50", "", "")'
        ' or label_replace(costmodel:request_duration_seconds:p99_5m{route="/v1/rank"}, "q", "p99", "", "")',
        "{q}",
    ),
    (
        "Online Kendall tau (running mean)",
        "costmodel:online_kendall_tau:avg",
        "v{version}",
    ),
    ("Fleet gain per target (default / best)", "costmodel:fleet_gain:max", "{target}"),
    (
        "Best / default per graph, median",
        "costmodel:fleet_best_over_default:p50",
        "{target}",
    ),
    ("Graphs tuned per target", "costmodel:fleet_graphs_tuned:max", "{target}"),
)


def plot(prom: PrometheusServer, start: float, end: float, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5), dpi=100)
    for ax, (title, expr, legend) in zip(axes.flat, PANELS, strict=True):
        for series in prom.query_range(expr, start, end, 2.0):
            t = (np.array([float(v[0]) for v in series["values"]]) - start) / 60
            y = np.array([float(v[1]) for v in series["values"]])
            ax.plot(t, y, label=legend.format_map(_Labels(series["metric"])))
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("minutes (rates and quantiles over 5-minute windows)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        "costmodel recorded series (deploy/monitoring/rules.yml), real "
        "service + Prometheus, tuners replaying datasets/xla_cpu",
        fontsize=11,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)


class _Labels(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=420.0)
    parser.add_argument("--programs", type=int, default=12, help="per target")
    parser.add_argument("--out", type=Path, default=RESULTS / "monitoring.png")
    args = parser.parse_args(argv)
    # Before any import of the process harness: an install without it says so.
    require_harness("python -m xla_costmodel.studies.monitoring")
    from xla_costmodel.harness import ServiceServer
    from xla_costmodel.studies.prometheus import PrometheusServer

    fleet = programs(args.programs)
    with TemporaryDirectory(prefix="costmodel-monitoring-") as tmp:
        env = {
            "COSTMODEL_MODELS": "xla_cpu",
            "COSTMODEL_DATA_DIR": f"{tmp}/data",
            "COSTMODEL_FLEET_REFRESH_S": "2",
        }
        with (
            ServiceServer(Path(tmp), env) as server,
            PrometheusServer(Path(tmp), [f"127.0.0.1:{server.port}"], 1.0) as prom,
        ):
            start = time.time()
            targets = drive(server.url, fleet, args.seconds)
            plot(prom, start, time.time(), args.out)
    args.out.with_suffix(".json").write_text(json.dumps(targets, indent=2) + "\n")
    print(json.dumps(targets, indent=2))


if __name__ == "__main__":
    main()
