"""``costmodel bench``: run the benchmark, print a table (or JSON), save JSON and a plot."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from xla_costmodel.bench import require_harness

if TYPE_CHECKING:
    from xla_costmodel.bench.plan import Mode, Plan

DEFAULT_OUT = Path("bench/results")  # from the repository root (make)


# One alias per flag, in the order of --help: the command reads as its parameter list.
QuickOption = Annotated[
    bool, typer.Option("--quick", help="Under 60 s: fewer repeats, short load.")
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON object on stdout.")
]
OutOption = Annotated[
    Path, typer.Option(help="Where the JSON result and the PNG plot go.")
]
ModelDirOption = Annotated[
    Path | None,
    typer.Option(help="Model repository to serve (default: the shipped models)."),
]
ThreadsOption = Annotated[
    int, typer.Option(help="onnxruntime intra-op threads in process (the server: 1).")
]
WorkersOption = Annotated[
    int | None,
    typer.Option(help="Server inference workers (default: the service's)."),
]
ClientsOption = Annotated[
    int | None, typer.Option(help="Concurrent clients in the load phase.")
]
LoadSecondsOption = Annotated[
    float | None, typer.Option(help="Duration of the load phase.")
]
ServerEnvOption = Annotated[
    list[str] | None,
    typer.Option(
        "--server-env",
        help="KEY=VALUE for the server (repeatable), e.g. to try a setting: "
        "--server-env COSTMODEL_MAX_INFLIGHT=16.",
    ),
]
SmokeOption = Annotated[
    bool, typer.Option("--smoke", hidden=True, help="Tiny sizes (tests).")
]


def bench(
    quick: QuickOption = False,
    json_: JsonOption = False,
    out: OutOption = DEFAULT_OUT,
    model_dir: ModelDirOption = None,
    threads: ThreadsOption = 1,
    workers: WorkersOption = None,
    clients: ClientsOption = None,
    load_seconds: LoadSecondsOption = None,
    server_env: ServerEnvOption = None,
    smoke: SmokeOption = False,
) -> None:
    """Benchmark the service against onnxruntime and PyTorch in process, side by side.

    Starts a redis-server and the service (uvicorn, 1 worker) on free loopback ports,
    runs every phase, stops them. Figures are medians over repeats in this one run.
    """
    # Before any import of the process harness: an install without it says so.
    require_harness("costmodel bench")
    # Imported here: building the ``costmodel`` app must not load onnxruntime.
    from xla_costmodel import shipped_models
    from xla_costmodel.bench.harness import Options, run

    mode: Mode = "smoke" if smoke else "quick" if quick else "full"
    plan = _plan(mode, clients, load_seconds)
    opts = Options(
        model_dir=(model_dir or shipped_models()).resolve(),
        out=out.resolve(),
        threads=threads,
        workers=workers,
        server_env=parse_env(server_env or []),
    )
    console = Console(stderr=True)
    result = run(plan, opts, lambda msg: console.log(msg))
    _report(result, save(result, opts.out), json_=json_, console=console)


def _plan(mode: Mode, clients: int | None, load_seconds: float | None) -> Plan:
    """The mode's plan, with the load phase's clients and seconds when given."""
    from xla_costmodel.bench.plan import PLANS

    plan = PLANS[mode]
    if clients is None and load_seconds is None:
        return plan
    load = replace(
        plan.load,
        clients=clients or plan.load.clients,
        seconds=load_seconds or plan.load.seconds,
    )
    return replace(plan, load=load)


def _report(
    result: dict[str, Any], path: Path, *, json_: bool, console: Console
) -> None:
    """Print the figures (a table, or JSON on stdout); exit 1 when one is missing."""
    from xla_costmodel.bench.report import missing_keys, print_table, to_json

    if json_:
        sys.stdout.write(to_json(result) + "\n")
    else:
        print_table(result, Console(width=max(130, Console().width)))
        console.print(f"saved {path}")
    bad = missing_keys(result)
    if bad:
        console.print(f"[red]missing or non-numeric figures: {', '.join(bad)}[/red]")
        raise typer.Exit(1)


def parse_env(items: list[str]) -> dict[str, str]:
    pairs = [item.partition("=") for item in items]
    bad = [
        item
        for item, (key, sep, _) in zip(items, pairs, strict=True)
        if not sep or not key
    ]
    if bad:
        raise typer.BadParameter(
            f"expected KEY=VALUE, got {bad}", param_hint="--server-env"
        )
    return {key: value for key, _, value in pairs}


def save(result: dict[str, object], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"bench_{result['mode']}.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return path
