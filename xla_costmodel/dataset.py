"""``costmodel dataset export``: the measurement database as TpuGraphs npz files.

Registered by ``costmodel/cli.py`` under the ``dataset`` group. The database layer
(SQLAlchemy, alembic) is imported when the command runs, not when the CLI is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

OUT_HELP = "Directory to write <collection>/<target>/<graph_id>.npz into."
URL_HELP = (
    "sqlite:///PATH or postgresql://…; default $COSTMODEL_DATABASE_URL, else "
    "costmodel.db in the service's data directory ($COSTMODEL_DATA_DIR, data/)."
)


def export(
    out: Annotated[Path, typer.Option(help=OUT_HELP)],
    collection: Annotated[
        str | None, typer.Option(help="Only this collection (tile, layout).")
    ] = None,
    target: Annotated[
        str | None, typer.Option(help="Only this hardware target (e.g. tpu-v3).")
    ] = None,
    database_url: Annotated[str | None, typer.Option(help=URL_HELP)] = None,
) -> None:
    """Export measured runtimes as TpuGraphs files that `costmodel train --data` reads."""
    from pydantic import ValidationError
    from rich.console import Console
    from rich.table import Table

    from xla_costmodel.service.settings import Settings
    from xla_costmodel.service.store import MeasurementStore, StoreError
    from xla_costmodel.service.store.engine import normalise_url, sqlite_path
    from xla_costmodel.service.store.export import ExportedFile, export_dataset

    console = Console(stderr=True)
    try:
        settings = Settings(database_url=database_url) if database_url else Settings()
    except ValidationError as exc:
        console.print(f"[red]invalid settings:[/] {exc}")
        raise typer.Exit(2) from None
    url = settings.database_url or f"sqlite:///{settings.data_dir / 'costmodel.db'}"
    try:
        path = sqlite_path(normalise_url(url))
        if path is not None and not path.is_file():  # never create an empty one
            console.print(f"[red]no database at {path}[/]")
            raise typer.Exit(1)
        store = MeasurementStore.open(url)
    except StoreError as exc:
        console.print(f"[red]cannot open the database:[/] {exc}")
        raise typer.Exit(1) from None
    totals: dict[tuple[str, str], list[int]] = {}
    try:
        for item in export_dataset(store, out, collection, target):
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
    except StoreError as exc:
        console.print(f"[red]export failed:[/] {exc}")
        raise typer.Exit(1) from None
    finally:
        store.close()
    table = Table(title=f"exported to {out}")
    for column in ("collection", "target", "files", "configs", "measurements"):
        table.add_column(
            column, justify="left" if column in ("collection", "target") else "right"
        )
    for (coll, tgt), (files, configs, rows) in sorted(totals.items()):
        table.add_row(coll, tgt, str(files), str(configs), str(rows))
    if not totals:
        console.print("no measurements to export")
    else:
        Console().print(table)
