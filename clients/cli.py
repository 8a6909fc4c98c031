"""``costmodel replay``: the command-line face of ``xla_costmodel.clients.replay`` (rendering only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from xla_costmodel.clients.client import CostModelClient
from xla_costmodel.clients.errors import CostModelError
from xla_costmodel.clients.replay import Budget, Replayer, ReplayReport
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.reader import expand_paths

DEFAULT_BUDGET = 5  # the tile task's historical top-5
# Replay is offline evaluation, not a compiler on a deadline: be patient with big graphs.
REPLAY_TIMEOUT = httpx.Timeout(connect=5.0, read=120.0, write=60.0, pool=10.0)


# One alias per flag, in the order of --help: the command reads as its parameter list.
ServerOption = Annotated[str, typer.Option("--server", help="Service base URL.")]
DataOption = Annotated[
    list[Path],
    typer.Option(
        "--data",
        exists=True,
        help="A labelled TpuGraphs .npz file or a directory of them; repeat for more.",
    ),
]
ModelOption = Annotated[
    str | None,
    typer.Option(
        "--model", help="Model to ask (tile|layout). Default: per file, from its keys."
    ),
]
BudgetOption = Annotated[
    int | None,
    typer.Option(
        "--budget",
        min=1,
        help=f"Configs measured per graph (default {DEFAULT_BUDGET}).",
    ),
]
BudgetFractionOption = Annotated[
    float | None,
    typer.Option(
        "--budget-fraction",
        min=0.0,
        max=1.0,
        help="Fraction of each graph's configs to measure (at least one).",
    ),
]
RoundsOption = Annotated[
    int | None,
    typer.Option(
        "--rounds",
        min=1,
        help="Tune in rounds: each ranks the configs not measured yet, measures the "
        "top --budget and sends them as feedback (the service adapts); reports the "
        "learning curve against the model alone, random and a per-graph model.",
    ),
]
TargetOption = Annotated[
    str | None,
    typer.Option(
        "--target",
        help="Hardware the runtimes are sent under (default: the model's target).",
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON object instead of a table.")
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="COSTMODEL_TOKEN",
        show_envvar=True,
        help="Writer token for the feedback of --rounds (costmodel tokens create).",
    ),
]


def replay(
    *,  # keyword-only: the required --data keeps its place in --help
    server: ServerOption = "http://127.0.0.1:8000",
    data: DataOption,
    model: ModelOption = None,
    budget: BudgetOption = None,
    budget_fraction: BudgetFractionOption = None,
    rounds: RoundsOption = None,
    target: TargetOption = None,
    json_: JsonOption = False,
    token: TokenOption = None,
) -> None:
    """Act as an autotuner on files with measured runtimes and report how well the
    model's top-K does against the true best, the default config and random K."""
    try:
        plan = _budget(budget, budget_fraction)
        paths = expand_paths(data)
    except (ValueError, GraphFormatError) as exc:
        raise typer.BadParameter(str(exc)) from None
    stderr = Console(stderr=True)
    try:
        with CostModelClient(server, timeout=REPLAY_TIMEOUT, token=token) as client:
            replayer = Replayer(client, plan, model, rounds, target)
            report = _run(replayer, paths, stderr)
    except CostModelError as exc:
        stderr.print(f"[red]replay failed:[/red] {exc}")
        raise typer.Exit(1) from None
    if json_:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        _print(report, stderr)


def _budget(budget: int | None, budget_fraction: float | None) -> Budget:
    """What each graph may measure: ``--budget`` configs or ``--budget-fraction``."""
    if budget is not None and budget_fraction is not None:
        raise typer.BadParameter("give --budget or --budget-fraction, not both")
    if budget_fraction is not None:
        return Budget(fraction=budget_fraction)
    return Budget(count=budget or DEFAULT_BUDGET)


def _print(report: ReplayReport, stderr: Console) -> None:
    """The tables on stdout, notes on stderr."""
    # Piped output gets rich's 80-column default; the table needs a little more.
    console = Console()
    if not console.is_terminal:
        console = Console(width=100)
    console.print(render(report))
    if report.round_means():
        console.print(render_rounds(report))
    if report.feedback_unsupported:
        stderr.print(
            "[yellow]note:[/yellow] the service has no /v1/feedback; none sent"
        )


def _run(replayer: Replayer, paths: list[Path], console: Console) -> ReplayReport:
    columns = (
        TextColumn("replay"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("", total=len(paths))
        return replayer.run(
            paths, lambda name: bar.update(task, advance=1, description=name)
        )


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(report: ReplayReport) -> Table:
    """Per-graph rows, then the means; ratios to 3 decimals, '-' where undefined."""
    title = f"replay of {len(report.graphs)} graph(s): model top-K vs random K"
    table = Table(title=title)
    # Short headers keep the numbers readable in an 80-column terminal.
    table.add_column("graph", no_wrap=True, overflow="ellipsis", max_width=18)
    table.add_column("model", no_wrap=True, min_width=8)
    table.add_column("K/C", justify="right", no_wrap=True, min_width=8)
    for column in ("slowdown", "speedup", "rand slow", "rand speed"):
        table.add_column(column, justify="right", no_wrap=True)
    for g in report.graphs:
        table.add_row(
            Path(g.file).stem,
            f"{g.model}:{g.model_version}",
            f"{g.score.budget}/{g.score.configs}",
            _fmt(g.score.slowdown),
            _fmt(g.score.speedup_vs_default),
            _fmt(g.score.random_slowdown),
            _fmt(g.score.random_speedup_vs_default),
        )
    mean = report.mean()
    fraction = mean["measured_fraction"]
    table.add_section()
    table.add_row(
        "mean",
        "",
        "-" if fraction is None else f"{fraction:.1%}",
        _fmt(mean["slowdown"]),
        _fmt(mean["speedup_vs_default"]),
        _fmt(mean["random_slowdown"]),
        _fmt(mean["random_speedup_vs_default"]),
    )
    notes = [
        "slowdown = best found / true best - 1; speedup = default / best found;",
        "rand = the same for K configs drawn at random (exact expectation)",
    ]
    if any(g.score.default_ns is None for g in report.graphs):
        notes.append("speedup '-': the file does not mark a default config (layout)")
    notes += [f"skipped {Path(s['file']).name}: {s['reason']}" for s in report.skipped]
    table.caption = "\n".join(notes)
    return table


def render_rounds(report: ReplayReport) -> Table:
    """The learning curve: mean slowdown per round for each strategy."""
    table = Table(title="learning curve: mean slowdown after each round")
    for column in (
        "round",
        "measured",
        "adapted",
        "model+adapt",
        "model",
        "random",
        "per-graph",
    ):
        table.add_column(column, justify="right", no_wrap=True)
    for row in report.round_means():
        table.add_row(
            str(row["round"]),
            str(row["measured"]),
            f"{row['adapted']:.1f}",
            _fmt(row["slowdown"]),
            _fmt(row["model_slowdown"]),
            _fmt(row["random_slowdown"]),
            _fmt(row["per_graph_slowdown"]),
        )
    table.caption = "adapted = mean measurements the service's ranking used"
    return table
