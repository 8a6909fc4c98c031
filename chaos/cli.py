"""``costmodel chaos``: run ``chaos.harness``, print a table or one JSON object."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table


def chaos(
    quick: Annotated[
        bool,
        typer.Option("--quick", help="12 s phases and a 60 s soak (about 3 minutes)."),
    ] = False,
    json_: Annotated[
        bool, typer.Option("--json", help="Print one JSON object on stdout.")
    ] = False,
    ray: Annotated[
        bool,
        typer.Option(
            "--ray",
            help="Also kill a Ray Serve replica (needs the ray extra; skipped "
            "without it).",
        ),
    ] = False,
) -> None:
    """Faults under load: Redis paused and restarted, PostgreSQL restarted, model
    reloads (good and corrupt), overload; then a soak. Loopback only.

    Exits 1 when feedback the service acknowledged is missing from the database.
    """
    # Imported here: building the ``costmodel`` app must not load the benchmark, and
    # an install without the test harness says so in one line (bench/__init__.py).
    from xla_costmodel.bench import require_harness

    require_harness("costmodel chaos")
    from xla_costmodel.chaos.harness import PLANS, run

    console = Console(stderr=True)
    plan = PLANS["quick" if quick else "full"]
    result = run(plan, lambda m: console.log(m), ray=ray)
    if json_:
        sys.stdout.write(to_json(result) + "\n")
    else:
        print_table(result, Console())
    if result["feedback_lost"] > 0:
        raise typer.Exit(1)


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, allow_nan=False)


def print_table(result: dict[str, Any], console: Console) -> None:
    title = (
        f"costmodel chaos ({result['mode']}, {result['clients']} clients, "
        f"max in flight {result['max_inflight']})"
    )
    table = Table(title=title)
    columns = (
        "phase",
        "requests",
        "errors",
        "p50 ms",
        "p99 ms",
        "503s",
        "with Retry-After",
        "500s",
        "other 5xx",
        "what happened",
    )
    for column in columns:
        table.add_column(column, justify="left" if column[0] in "pw" else "right")
    for p in result["phases"]:
        table.add_row(
            p["name"],
            str(p["requests"]),
            str(p["errors"]),
            _ms(p["p50_ms"]),
            _ms(p["p99_ms"]),
            str(p["503s"]),
            str(p["retry_after"]),
            str(p["500s"]),
            str(p["other_5xx"]),
            _fault({**p["fault"], **_felt(p["server"])}),
        )
    console.print(table)
    lost = result["feedback_lost"]
    console.print(
        f"feedback acknowledged: {result['feedback_acknowledged']} calls, "
        f"{result['feedback_acknowledged_rows']} rows; in PostgreSQL: "
        f"{result['feedback_rows_in_database']} rows; "
        + (f"[red]lost: {lost}[/red]" if lost else "lost: 0")
    )
    rss = result["rss"]
    console.print(
        f"server RSS over the {result['soak_s']:g} s soak: {rss['rss_mb_start']} -> "
        f"{rss['rss_mb_end']} MB (peak {rss['rss_mb_peak']}), "
        f"growth {100 * result['rss_growth']:.1f} % (goal < 10 %)"
    )
    failed = [name for name, ok in result["checks"].items() if not ok]
    console.print(
        "checks: " + ("all passed" if not failed else "FAILED " + ", ".join(failed))
    )
    for skip in result["skipped"]:
        console.print(f"skipped {skip['phase']}: {skip['reason']}")
    console.print(f"wall time {result['wall_s']} s")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _felt(server: dict[str, float]) -> dict[str, int]:
    """The server counters that moved during the phase."""
    return {name: int(n) for name, n in server.items() if n}


def _fault(fault: dict[str, Any]) -> str:
    return ", ".join(
        f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in fault.items()
    )
