"""The measurement store as a command opens it (``costmodel tokens``,
``measurements``, ``dataset export``): the database a ``--database-url`` names, else
the service's settings', with one line and an exit status for what goes wrong.

    with open_store(database_url, create=False) as store: ...
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
from pydantic import SecretStr, ValidationError
from rich.console import Console

from xla_costmodel.service.settings import Settings
from xla_costmodel.service.store import MeasurementStore, StoreError
from xla_costmodel.service.store.engine import normalise_url, sqlite_path

err = Console(stderr=True)


@contextmanager
def open_store(
    database_url: str | None, create: bool = False
) -> Iterator[MeasurementStore]:
    """The measurement store, or exit 2 (bad settings) / 1 (cannot open it). Never
    creates an empty SQLite file unless ``create``; messages never show a password."""
    try:
        given = SecretStr(database_url) if database_url else None
        settings = Settings.load(database_url=given) if given else Settings()
    except ValidationError as exc:  # the settings hide input values (secrets)
        err.print(f"[red]invalid settings:[/] {exc}")
        raise typer.Exit(2) from None
    if settings.stores.database_url is not None:
        url = settings.stores.database_url.get_secret_value()
    else:
        url = f"sqlite:///{settings.stores.data_dir / 'costmodel.db'}"
    try:
        path = sqlite_path(normalise_url(url))
        if path is not None and not create and not path.is_file():
            err.print(f"[red]no database at {path}[/]")
            raise typer.Exit(1)
        store = MeasurementStore.open(url)
    except StoreError as exc:
        err.print(f"[red]cannot open the database:[/] {exc}")
        raise typer.Exit(1) from None
    try:
        yield store
    except StoreError as exc:
        err.print(f"[red]failed:[/] {exc}")
        raise typer.Exit(1) from None
    finally:
        store.close()
