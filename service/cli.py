"""``costmodel serve``: run the service under uvicorn.

``serve`` is a plain typer command function; ``costmodel/cli.py`` registers it. Options
override the ``COSTMODEL_*`` environment, which overrides the defaults in ``Settings``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
import uvicorn
from pydantic import ValidationError

from xla_costmodel.service.app import create_app
from xla_costmodel.service.logs import configure_logging
from xla_costmodel.service.settings import Settings


def serve(
    host: Annotated[
        str | None, typer.Option(help="bind address (default 127.0.0.1)")
    ] = None,
    port: Annotated[int | None, typer.Option(help="port (default 8000)")] = None,
    model_dir: Annotated[
        Path | None, typer.Option(help="artifact root: <dir>/<model>/<version>/")
    ] = None,
    redis_url: Annotated[
        str | None,
        typer.Option(help="redis://host:port/db; none = in-process cache only"),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            help="sqlite:///PATH or postgresql://...; none = data/costmodel.db"
        ),
    ] = None,
    models: Annotated[
        str | None,
        typer.Option(help="comma-separated model names (default tile,layout)"),
    ] = None,
    log_level: Annotated[
        str | None, typer.Option(help="DEBUG, INFO, WARNING, ERROR")
    ] = None,
) -> None:
    """Serve the tile and layout models over HTTP (see /docs)."""
    overrides: dict[str, Any] = {
        "host": host,
        "port": port,
        "model_dir": model_dir,
        "redis_url": redis_url,
        "database_url": database_url,
        "models": models,
        "log_level": log_level.upper() if log_level else None,
    }
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from None
    configure_logging(settings.log_level)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
    )


if __name__ == "__main__":
    typer.run(serve)
