"""``costmodel tune FILE.py:NAME``: tune a JAX program's XLA:CPU options (rendering only).

``NAME`` is a zero-argument function in ``FILE.py`` returning ``(fn, args)``, like a
zoo program's builder; the tuning is ``xla_costmodel.clients.xla.tune``, run in a
child process (``isolate.supervise``) that is restarted if XLA crashes it. jax is
imported by that child (by the file, and by ``tune``), never at import.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.user_output import to_stderr
from xla_costmodel.clients.xla.isolate import forwarded_argv, supervise, worker_token
from xla_costmodel.clients.xla.programs import load_program, short
from xla_costmodel.clients.xla.tune import TuneReport
from xla_costmodel.clients.xla.tune import tune as run_tune
from xla_costmodel.clients.xla.tune_report import Load


class StrategyName(StrEnum):
    model = "model"
    random = "random"


# Over 60 lines for its typer options only (one parameter per flag): the work is _work's.
def tune(  # noqa: PLR0913 -- typer: one parameter per command-line option
    ctx: typer.Context,
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
    if not worker:
        # Some option sets crash XLA itself: tune in a child process, restarted after
        # a crash; the restarted run leaves the crashing config out (its journal).
        # The token goes to it on its stdin: never its argv (ps shows that), nor its
        # environment (isolate.py).
        omit = ("token", "restarts", "worker")
        argv = [*forwarded_argv(ctx, omit), "--worker"]
        raise typer.Exit(supervise(argv, restarts, stderr.print, token=token))
    token = worker_token()
    kwargs: dict[str, Any] = {
        "strategy": strategy.value,
        "seed": seed,
        "candidates": candidates,
        "rounds": rounds,
        "model": model,
        "target": target,
        "reuse": reuse,
        "min_writers": min_writers,
    }
    report = _work(
        program,
        server if strategy is StrategyName.model else None,
        token,
        budget,
        kwargs,
    )
    if json_:
        typer.echo(json.dumps(report.to_json(), indent=2))
        return
    console = Console() if sys.stdout.isatty() else Console(width=120)
    console.print(render(report, program))
    for line in summary(report):
        console.print(line, highlight=False)


@to_stderr()  # what the program prints (importing, tracing) is not the report
def _work(
    program: str,
    server: str | None,
    token: str | None,
    budget: int,
    kwargs: dict[str, Any],
) -> TuneReport:
    """The worker's tuning of ``program`` (with the service at ``server``, if any),
    its progress on stderr; a bad configuration is the command's BadParameter."""
    fn, args = load_program(program)
    stderr = Console(stderr=True)

    def progress(line: str) -> None:
        stderr.print(f"[dim]{line}[/dim]")

    try:
        if server is not None:
            with CostModelClient(server, token=token) as client:
                return run_tune(
                    fn, args, budget, client=client, progress=progress, **kwargs
                )
        return run_tune(fn, args, budget, progress=progress, **kwargs)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


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
        *([] if report.load is None else [_load_line(report.load)]),
        *(f"note: {note}" for note in report.notes),
    ]


def _load_line(load: Load) -> str:
    """What the machine was doing: the figures depend on it (confirm.py)."""
    start, end = load.start[0], load.end[0]
    line = f"load: {start:.2f} -> {end:.2f} (1-min average)"
    if load.confirm_controls is not None:
        line += f"; fresh process's controls {load.confirm_controls:.1%} apart"
    return line
