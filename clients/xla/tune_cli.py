"""``costmodel tune FILE.py:NAME``: tune a JAX program's XLA:CPU options (rendering only).

``NAME`` is a zero-argument function in ``FILE.py`` returning ``(fn, args)``, like a
zoo program's builder; the tuning is ``xla_costmodel.clients.xla.tune``, run in a
child process (``isolate.supervise``) that is restarted if XLA crashes it. The
options build one ``TuneConfig``, checked before the child starts (a bad one is a
usage error) and built again from the same options by the child. jax is imported by
that child (by the file, and by ``tune``), never at import.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.user_output import to_stderr
from xla_costmodel.clients.xla import spec_rows
from xla_costmodel.clients.xla.isolate import forwarded_argv, supervise, worker_token
from xla_costmodel.clients.xla.programs import load_program, short
from xla_costmodel.clients.xla.tune import TuneConfig, TuneReport
from xla_costmodel.clients.xla.tune import tune as run_tune
from xla_costmodel.clients.xla.tune_config import Strategy
from xla_costmodel.clients.xla.tune_report import Load


class StrategyName(StrEnum):
    model = "model"
    random = "random"


STRATEGIES: dict[StrategyName, Strategy] = {
    StrategyName.model: "model",
    StrategyName.random: "random",
}

# One alias per flag, in the order of --help (and of the worker's argv): the command
# reads as its parameter list.
ProgramArgument = Annotated[
    str,
    typer.Argument(
        metavar="FILE.py:NAME", help="NAME() in FILE.py returns (fn, args)."
    ),
]
ServerOption = Annotated[str, typer.Option("--server", help="Service base URL.")]
BudgetOption = Annotated[
    int, typer.Option("--budget", min=1, help="Configs to compile and measure.")
]
StrategyOption = Annotated[
    StrategyName,
    typer.Option(
        "--strategy",
        help="model: the service ranks, feedback steers the rounds; random: a baseline.",
    ),
]
SeedOption = Annotated[
    int, typer.Option("--seed", help="Candidate sample and visit-order seed.")
]
CandidatesOption = Annotated[
    int, typer.Option("--candidates", min=2, help="Configs sampled.")
]
RoundsOption = Annotated[
    int | None, typer.Option("--rounds", min=1, help="Default min(3, K).")
]
ModelOption = Annotated[str, typer.Option("--model", help="Model to ask.")]
TargetOption = Annotated[
    str | None,
    typer.Option(
        "--target", help="Hardware name of the runtimes (default: this CPU's)."
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="COSTMODEL_TOKEN",
        show_envvar=True,
        help="Writer token for the feedback (costmodel tokens create).",
    ),
]
ReuseOption = Annotated[
    bool,
    typer.Option(
        "--reuse/--no-reuse",
        help="Verify what the fleet decided for this program first (GET /v1/best): "
        "a fresh decision that holds ends the run with one compile.",
    ),
]
MinWritersOption = Annotated[
    int,
    typer.Option(
        "--min-writers", min=1, help="Reuse a decision only this many writers made."
    ),
]
RestartsOption = Annotated[
    int,
    typer.Option(
        "--restarts",
        min=0,
        help="Restarts after XLA crashes the tuning (the crashing config is left out).",
    ),
]
SpecOption = Annotated[
    str,
    typer.Option(
        "--spec",
        help="The config space: xla_cpu/2 (with the loop threshold) or xla_cpu/1 "
        "(the older space, to compare).",
    ),
]
WorkerOption = Annotated[bool, typer.Option("--worker", hidden=True)]


def tune(  # noqa: PLR0913 -- typer: one parameter per command-line option
    ctx: typer.Context,
    program: ProgramArgument,
    server: ServerOption = "http://127.0.0.1:8000",
    budget: BudgetOption = 8,
    strategy: StrategyOption = StrategyName.model,
    seed: SeedOption = 0,
    candidates: CandidatesOption = 256,
    rounds: RoundsOption = None,
    model: ModelOption = "xla_cpu",
    target: TargetOption = None,
    json_: JsonOption = False,
    token: TokenOption = None,
    reuse: ReuseOption = True,
    min_writers: MinWritersOption = 1,
    restarts: RestartsOption = 3,
    spec: SpecOption = spec_rows.SPEC,
    worker: WorkerOption = False,
) -> None:
    """Tune a JAX program's XLA:CPU compiler options: the service ranks sampled option
    sets, the best few are compiled and measured here, the default kept unless beaten
    beyond the noise."""
    try:  # the tuning's knobs, built and checked once
        cfg = TuneConfig(
            budget=budget,
            model=model,
            strategy=STRATEGIES[strategy],
            seed=seed,
            rounds=rounds,
            candidates=candidates,
            target=target,
            reuse=reuse,
            min_writers=min_writers,
            spec=spec,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if not worker:
        # Some option sets crash XLA itself: tune in a child process, restarted after
        # a crash; the restarted run leaves the crashing config out (its journal).
        # The token goes to it on its stdin: never its argv (ps shows that), nor its
        # environment (isolate.py).
        argv = [*forwarded_argv(ctx, ("token", "restarts", "worker")), "--worker"]
        log = Console(stderr=True).print
        raise typer.Exit(supervise(argv, restarts, log, token=token))
    server_or_none = server if cfg.strategy == "model" else None
    report = _work(program, server_or_none, worker_token(), cfg)
    if json_:
        typer.echo(json.dumps(report.to_json(), indent=2))
        return
    console = Console() if sys.stdout.isatty() else Console(width=120)
    console.print(render(report, program))
    for line in summary(report):
        console.print(line, highlight=False)


@to_stderr()  # what the program prints (importing, tracing) is not the report
def _work(
    program: str, server: str | None, token: str | None, cfg: TuneConfig
) -> TuneReport:
    """The worker's tuning of ``program`` (with the service at ``server``, if any),
    its progress on stderr."""
    fn, args = load_program(program)
    stderr = Console(stderr=True)

    def progress(line: str) -> None:
        stderr.print(f"[dim]{line}[/dim]")

    if server is None:
        return run_tune(fn, args, cfg, progress=progress)
    with CostModelClient(server, token=token) as client:
        return run_tune(fn, args, cfg, client=client, progress=progress)


def render(report: TuneReport, program: str) -> Table:
    """The default, then the measured configs fastest first, then failures."""
    table = Table(title=f"tune {program}: {report.strategy}, K={report.budget}")
    table.add_column("compiler options", overflow="fold")
    for column in ("ms", "vs default", "final ms", "round"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_row("(default)", "-", "1.000", f"{report.default_ms:.3f}", "controls")
    for m in sorted(report.measured, key=lambda m: m.vs_default):
        table.add_row(
            short(m.compiler_options),
            f"{m.ms:.3f}",
            f"{m.vs_default:.3f}",
            "-" if m.final_ms is None else f"{m.final_ms:.3f}",
            str(m.round),
        )
    for f in report.failed:
        table.add_row(short(f.compiler_options), "failed", "", "", "")
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
