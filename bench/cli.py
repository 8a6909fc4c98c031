"""``costmodel bench``: run the benchmark, print a table (or JSON), save JSON and a plot."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

DEFAULT_OUT = Path("bench/results")  # from the repository root (make)


# Over 60 lines for its typer options only (one parameter per flag); the body is short.
def bench(
    quick: Annotated[
        bool, typer.Option("--quick", help="Under 60 s: fewer repeats, short load.")
    ] = False,
    json_: Annotated[
        bool, typer.Option("--json", help="Print one JSON object on stdout.")
    ] = False,
    out: Annotated[
        Path, typer.Option(help="Where the JSON result and the PNG plot go.")
    ] = DEFAULT_OUT,
    model_dir: Annotated[
        Path | None,
        typer.Option(help="Model repository to serve (default: the shipped models)."),
    ] = None,
    threads: Annotated[
        int, typer.Option(help="onnxruntime intra-op threads (in process and server).")
    ] = 1,
    workers: Annotated[
        int | None,
        typer.Option(help="Server inference workers (default: the service's)."),
    ] = None,
    clients: Annotated[
        int | None, typer.Option(help="Concurrent clients in the load phase.")
    ] = None,
    load_seconds: Annotated[
        float | None, typer.Option(help="Duration of the load phase.")
    ] = None,
    server_env: Annotated[
        list[str] | None,
        typer.Option(
            "--server-env",
            help="KEY=VALUE for the server (repeatable), e.g. to try a setting: "
            "--server-env COSTMODEL_SCORE_CHUNK_ROWS=32768.",
        ),
    ] = None,
    smoke: Annotated[
        bool, typer.Option("--smoke", hidden=True, help="Tiny sizes (tests).")
    ] = False,
) -> None:
    """Benchmark the service against onnxruntime and PyTorch in process, side by side.

    Starts a redis-server and the service (uvicorn, 1 worker) on free loopback ports,
    runs every phase, stops them. Figures are medians over repeats in this one run.
    """
    # Imported here: building the ``costmodel`` app must not load onnxruntime.
    from dataclasses import replace

    from xla_costmodel import shipped_models
    from xla_costmodel.bench.harness import Options, run
    from xla_costmodel.bench.plan import PLANS
    from xla_costmodel.bench.report import missing_keys, print_table, to_json

    plan = PLANS["smoke" if smoke else "quick" if quick else "full"]
    if clients is not None or load_seconds is not None:
        load = replace(
            plan.load,
            clients=clients or plan.load.clients,
            seconds=load_seconds or plan.load.seconds,
        )
        plan = replace(plan, load=load)
    console = Console(stderr=True)
    opts = Options(
        model_dir=(model_dir or shipped_models()).resolve(),
        out=out.resolve(),
        threads=threads,
        workers=workers,
        server_env=parse_env(server_env or []),
    )
    result = run(plan, opts, lambda msg: console.log(msg))
    path = save(result, opts.out)
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
