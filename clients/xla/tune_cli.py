"""``costmodel tune FILE.py:NAME``: tune a JAX program's XLA:CPU options (rendering only).

``NAME`` is a zero-argument function in ``FILE.py`` returning ``(fn, args)``, like a
zoo program's builder; the tuning is ``xla_costmodel.clients.xla.tune``, run in a
child process (``isolate.supervise``) that is restarted if XLA crashes it. jax is
imported by that child (by the file, and by ``tune``), never at import.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.xla.isolate import supervise
from xla_costmodel.clients.xla.tune import TuneReport
from xla_costmodel.clients.xla.tune import tune as run_tune
from xla_costmodel.tpugraphs import xla_cpu

Program = tuple[Callable[..., Any], tuple[Any, ...]]


class StrategyName(StrEnum):
    model = "model"
    random = "random"


def tune(
    program: str = typer.Argument(
        ..., metavar="FILE.py:NAME", help="NAME() in FILE.py returns (fn, args)."
    ),
    server: str = typer.Option(
        "http://127.0.0.1:8000", "--server", help="Service base URL."
    ),
    budget: int = typer.Option(
        8, "--budget", min=1, help="Configs to compile and measure."
    ),
    strategy: StrategyName = typer.Option(
        StrategyName.model,
        "--strategy",
        help="model: the service ranks, feedback steers the rounds; random: a baseline.",
    ),
    seed: int = typer.Option(
        0, "--seed", help="Candidate sample and visit-order seed."
    ),
    candidates: int = typer.Option(256, "--candidates", min=2, help="Configs sampled."),
    rounds: int | None = typer.Option(
        None, "--rounds", min=1, help="Default min(3, K)."
    ),
    model: str = typer.Option("xla_cpu", "--model", help="Model to ask."),
    target: str | None = typer.Option(
        None, "--target", help="Hardware name of the runtimes (default: this CPU's)."
    ),
    json_: bool = typer.Option(False, "--json", help="Print one JSON object."),
    token: str | None = typer.Option(
        None,
        "--token",
        envvar="COSTMODEL_TOKEN",
        show_envvar=True,
        help="Writer token for the feedback (costmodel tokens create).",
    ),
    reuse: bool = typer.Option(
        True,
        "--reuse/--no-reuse",
        help="Verify what the fleet decided for this program first (GET /v1/best): "
        "a fresh decision that holds ends the run with one compile.",
    ),
    min_writers: int = typer.Option(
        1, "--min-writers", min=1, help="Reuse a decision only this many writers made."
    ),
    restarts: int = typer.Option(
        3,
        "--restarts",
        min=0,
        help="Restarts after XLA crashes the tuning (the crashing config is left out).",
    ),
    worker: bool = typer.Option(False, "--worker", hidden=True),
) -> None:
    """Tune a JAX program's XLA:CPU compiler options: the service ranks sampled option
    sets, the best few are compiled and measured here, the default kept unless beaten
    beyond the noise."""
    stderr = Console(stderr=True)
    if token:  # to the worker through its environment, never its argv (ps shows it)
        os.environ["COSTMODEL_TOKEN"] = token
    if not worker:
        # Some option sets crash XLA itself: tune in a child process, restarted after
        # a crash; the restarted run leaves the crashing config out (its journal).
        argv = [
            "tune",
            program,
            "--server",
            server,
            "--budget",
            str(budget),
            "--strategy",
            strategy.value,
            "--seed",
            str(seed),
            "--candidates",
            str(candidates),
            "--model",
            model,
            "--reuse" if reuse else "--no-reuse",
            "--min-writers",
            str(min_writers),
            "--worker",
            *(["--rounds", str(rounds)] if rounds is not None else []),
            *(["--target", target] if target is not None else []),
            *(["--json"] if json_ else []),
        ]
        raise typer.Exit(supervise(argv, restarts, stderr.print))
    fn, args = load_program(program)

    def progress(line: str) -> None:
        stderr.print(f"[dim]{line}[/dim]")

    kwargs: dict[str, Any] = {
        "strategy": strategy.value,
        "seed": seed,
        "candidates": candidates,
        "rounds": rounds,
        "model": model,
        "target": target,
        "progress": progress,
        "reuse": reuse,
        "min_writers": min_writers,
    }
    try:
        if strategy is StrategyName.model:
            with CostModelClient(server, token=token) as client:
                report = run_tune(fn, args, budget, client=client, **kwargs)
        else:
            report = run_tune(fn, args, budget, **kwargs)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if json_:
        typer.echo(json.dumps(report.to_json(), indent=2))
        return
    console = Console() if sys.stdout.isatty() else Console(width=120)
    console.print(render(report, program))
    for line in summary(report):
        console.print(line, highlight=False)


def load_program(spec: str) -> Program:
    """``NAME()`` of ``FILE.py`` (``spec`` = ``FILE.py:NAME``); BadParameter if not."""
    path_text, sep, name = spec.rpartition(":")
    path = Path(path_text)
    if not sep or not name or path.suffix != ".py" or not path.is_file():
        raise typer.BadParameter(
            f"expected FILE.py:NAME of an existing file, got {spec!r}"
        )
    module_spec = importlib.util.spec_from_file_location(f"_tune_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise typer.BadParameter(f"cannot import {path}")
    module = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, str(path.resolve().parent))  # the file may import its neighbours
    try:
        module_spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.resolve().parent))
    builder = getattr(module, name, None)
    if not callable(builder):
        raise typer.BadParameter(f"{path} has no function {name!r}")
    built = builder()
    if not (isinstance(built, tuple) and len(built) == 2 and callable(built[0])):
        raise typer.BadParameter(f"{name}() must return (fn, args), got {type(built)}")
    fn, args = built
    return fn, tuple(args)


def short(options: dict[str, xla_cpu.OptionValue]) -> str:
    """Compiler options in a few words: ``ynn=DOT+REDUCE -fusion,cse sched=MEMORY...``."""
    if not options:
        return "(default)"
    parts = []
    for key, value in options.items():
        if key == xla_cpu.YNN_KEY:
            names = [v.removeprefix(xla_cpu.YNN_PREFIX) for v in str(value).split(",")]
            parts.append("ynn=" + ("+".join(n for n in names if n) or "none"))
        elif key == xla_cpu.PASSES_KEY:
            parts.append(f"-{value}")
        elif key == xla_cpu.SCHEDULER_KEY:
            parts.append("sched=" + str(value).removeprefix(xla_cpu.SCHEDULER_PREFIX))
        else:
            parts.append(f"{key.removeprefix('xla_cpu_')}={value}")
    return " ".join(parts)


def render(report: TuneReport, program: str) -> Table:
    """The default, then the measured configs fastest first, then failures."""
    table = Table(title=f"tune {program}: {report.strategy}, K={report.budget}")
    table.add_column("compiler options", overflow="fold")
    for column in ("ms", "vs default", "final ms", "round"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_row("(default)", "-", "1.000", f"{report.default_ms:.3f}", "controls")
    for m in sorted(report.measured, key=lambda m: m["vs_default"]):
        final = m.get("final_ms")
        table.add_row(
            short(m["compiler_options"]),
            f"{m['ms']:.3f}",
            f"{m['vs_default']:.3f}",
            "-" if final is None else f"{final:.3f}",
            str(m["round"]),
        )
    for f in report.failed:
        table.add_row(short(f["compiler_options"]), "failed", "", "", "")
    return table


def summary(report: TuneReport) -> list[str]:
    """The choice and why, a line each."""
    service = "not asked (random)" if report.strategy == "random" else "no answer"
    if report.service_answered:
        service = f"{report.model}:{report.model_version}"
    elif report.reused:
        service = "the fleet's decision, reused"
    return [
        f"chosen: {short(report.compiler_options)}",
        f"speedup {report.speedup:.3f}x (default {report.default_ms:.3f} ms, "
        f"best {report.best_ms:.3f} ms, noise {report.noise:.1%})",
        f"why: {report.reason}",
        f"service: {service}; target {report.target}; {report.compiler}; "
        f"{report.seconds:.1f} s",
        *(f"note: {note}" for note in report.notes),
    ]
