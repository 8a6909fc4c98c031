"""``costmodel dataset export``: the measurement database as TpuGraphs npz files.

Registered by ``costmodel/cli.py`` under the ``dataset`` group. The database layer
(SQLAlchemy, alembic) is imported when the command runs, not when the CLI is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.table import Table

OUT_HELP = "Directory to write <collection>/<target>/<graph_id>.npz into."
URL_HELP = (
    "sqlite:///PATH or postgresql://…; default $COSTMODEL_DATABASE_URL, else "
    "costmodel.db in the service's data directory ($COSTMODEL_DATA_DIR, data/)."
)


def export(
    out: Annotated[Path, typer.Option(help=OUT_HELP)],
    collection: Annotated[
        str | None, typer.Option(help="Only this collection (tile, layout, xla_cpu).")
    ] = None,
    target: Annotated[
        str | None, typer.Option(help="Only this hardware target (e.g. tpu-v3).")
    ] = None,
    writer: Annotated[
        list[str] | None,
        typer.Option(
            help="Only measurements these writers stored (costmodel tokens); "
            "repeatable; anonymous: the rows stored without a token."
        ),
    ] = None,
    exclude_writer: Annotated[
        list[str] | None,
        typer.Option(
            help="Never measurements these writers stored; repeatable; "
            "anonymous: the rows stored without a token."
        ),
    ] = None,
    database_url: Annotated[str | None, typer.Option(help=URL_HELP)] = None,
) -> None:
    """Export measured runtimes as TpuGraphs files that `costmodel train --data` reads.

    Each config's runtime is the median over writers of each writer's median."""
    from rich.console import Console

    from xla_costmodel.service.command_store import open_store
    from xla_costmodel.service.store.export import ExportedFile, export_dataset

    console = Console(stderr=True)
    totals: dict[tuple[str, str], list[int]] = {}
    with open_store(database_url) as store:
        found = export_dataset(
            store, out, collection, target, writer or None, exclude_writer or ()
        )
        for item in found:
            if isinstance(item, ExportedFile):
                row = totals.setdefault((item.collection, item.target), [0, 0, 0])
                row[0] += 1
                row[1] += item.configs
                row[2] += item.measurements
            else:
                console.print(
                    f"[yellow]skipped[/] {item.collection}/{item.target}/"
                    f"{item.graph_id}: {item.reason}"
                )
    if not totals:
        console.print("no measurements to export")
    else:
        Console().print(_table(out, totals))


def _table(out: Path, totals: dict[tuple[str, str], list[int]]) -> Table:
    """Files, configs and measurements exported per (collection, target)."""
    from rich.table import Table

    table = Table(title=f"exported to {out}")
    for column in ("collection", "target", "files", "configs", "measurements"):
        table.add_column(
            column, justify="left" if column in ("collection", "target") else "right"
        )
    for (coll, tgt), (files, configs, rows) in sorted(totals.items()):
        table.add_row(coll, tgt, str(files), str(configs), str(rows))
    return table
