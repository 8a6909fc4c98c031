"""``costmodel simulate``: the command over the fleet simulation (``studies.fleet``).

Parses the flags, checks what the run needs before it starts (a dataset of measured
programs: an installed package has none; torch for the model's prior), then runs
``fleet.simulate`` and prints, writes or plots its result (``fleet_report``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from xla_costmodel import paths
from xla_costmodel.studies import fleet
from xla_costmodel.studies import fleet_report as report
from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2

NEEDS_DATA = (
    "costmodel simulate replays measured runtimes: pass --data DIR, one folder per "
    "CPU target of PROGRAM.npz + PROGRAM.json files as `costmodel collect --out "
    "DIR/TARGET` writes them (a clone has five in datasets/xla_cpu)"
)
NEEDS_TORCH = (
    "costmodel simulate needs the train extra for the model's prior: "
    "pip install 'xla-costmodel[train]' (or pass --quick or --no-prior)"
)

# One alias per flag, in the order of --help: the command reads as its parameter list.
QuickOption = Annotated[
    bool, typer.Option("--quick", help="A few programs and orders: seconds.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
BudgetsOption = Annotated[
    str,
    typer.Option(
        "--budgets",
        help="Budgets K (configs compiled per run), comma-separated: one row each.",
    ),
]
OrdersOption = Annotated[
    int, typer.Option("--orders", min=1, help="Arrival orders per target.")
]
SeedOption = Annotated[int, typer.Option("--seed")]
DataOption = Annotated[
    Path, typer.Option("--data", help="The dataset: one folder per target.")
]
OutOption = Annotated[
    Path | None,
    typer.Option(
        "--out", help="Also write the JSON here (make xla-tuning: studies/results)."
    ),
]
PlotOption = Annotated[
    Path | None,
    typer.Option("--plot", help="Also plot speedup against compiles here (PNG)."),
]
PriorOption = Annotated[
    bool,
    typer.Option(
        "--prior/--no-prior",
        help="The model's prior, trained leaving each target out (needs the train "
        "extra; cached in --runs). Off with --quick.",
    ),
]
RunsOption = Annotated[Path, typer.Option("--runs")]
SpecOption = Annotated[
    str,
    typer.Option(
        "--spec",
        help="xla_cpu/2 (every collected row) or xla_cpu/1 (only the rows it can "
        "express: the older space on the same data).",
    ),
]


def simulate(  # noqa: PLR0913 -- typer: one parameter per command-line option
    quick: QuickOption = False,
    json_: JsonOption = False,
    budgets: BudgetsOption = ",".join(map(str, fleet.BUDGETS)),
    orders: OrdersOption = fleet.ORDERS,
    seed: SeedOption = 0,
    data: DataOption = fleet.DATA,
    out: OutOption = None,
    plot: PlotOption = None,
    prior: PriorOption = True,
    runs: RunsOption = paths.RUNS / "xla_cpu" / "cv",
    spec: SpecOption = xla_cpu2.SPEC,
) -> None:
    """Fleet simulation: tuning each target's programs after others were tuned."""
    data = dataset(data)
    console = Console(stderr=True, quiet=json_)
    if not quick and prior and importlib.util.find_spec("torch") is None:
        typer.echo(NEEDS_TORCH, err=True)
        raise typer.Exit(1)
    ks = parse_budgets(budgets)
    if spec not in (xla_cpu.SPEC, xla_cpu2.SPEC):
        raise typer.BadParameter(
            f"{xla_cpu2.SPEC} or {xla_cpu.SPEC}, got {spec!r}", param_hint="--spec"
        )
    found = None if quick or not prior else fleet.priors(data, runs, console)
    result = fleet.simulate(
        data,
        quick=quick,
        orders=orders,
        seed=seed,
        budgets=ks,
        priors=found,
        progress=None if json_ else console.print,
        spec=spec,
    )
    result["prior"] = found is not None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report.dump(result) + "\n")
    if plot is not None:
        console.print(report.plot(result, plot))
    typer.echo(report.dump(result) if json_ else report.format_result(result))


def dataset(data: Path) -> Path:
    """``data`` if it holds a target's measured programs; else exit 1 saying what
    the simulation needs (an installed package has no ``datasets/``)."""
    if data.is_dir() and any(
        d.is_dir() and any(d.glob("*.json")) for d in data.iterdir()
    ):
        return data
    typer.echo(f"error: no xla_cpu dataset at {data.resolve()}\n{NEEDS_DATA}", err=True)
    raise typer.Exit(1)


def parse_budgets(text: str) -> list[int]:
    """``--budgets``: comma-separated positive integers, sorted, each once."""
    try:
        out = sorted({int(b) for b in text.split(",") if b.strip()})
    except ValueError as exc:
        raise typer.BadParameter(f"comma-separated integers, got {text!r}") from exc
    if not out or out[0] < 1:
        raise typer.BadParameter("budgets must be positive integers")
    return out
