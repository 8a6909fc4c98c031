"""``costmodel serve``: run the service under uvicorn.

``serve`` is a plain typer command function; ``costmodel/cli.py`` registers it. Options
override the ``COSTMODEL_*`` environment, which overrides the defaults in ``Settings``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated, Any

import typer
import uvicorn
from pydantic import ValidationError

from xla_costmodel.extras import install_hint
from xla_costmodel.service.logs import configure_logging
from xla_costmodel.service.settings import Settings
from xla_costmodel.service.workers import run_workers

# Seconds uvicorn lets in-flight requests finish after SIGTERM; the Kubernetes
# Deployment's terminationGracePeriodSeconds must exceed it (deploy/k8s, tested).
GRACEFUL_SHUTDOWN_S = 10


# One alias per flag, in the order of --help: the command reads as its parameter list.
HostOption = Annotated[
    str | None, typer.Option(help="bind address (default 127.0.0.1)")
]
PortOption = Annotated[int | None, typer.Option(help="port (default 8000)")]
ModelDirOption = Annotated[
    Path | None, typer.Option(help="artifact root: <dir>/<model>/<version>/")
]
RedisUrlOption = Annotated[
    str | None,
    typer.Option(help="redis://host:port/db; none = in-process cache only"),
]
DatabaseUrlOption = Annotated[
    str | None,
    typer.Option(help="sqlite:///PATH or postgresql://...; none = data/costmodel.db"),
]
ModelsOption = Annotated[
    str | None,
    typer.Option(help="comma-separated model names (default tile,layout,xla_cpu)"),
]
LogLevelOption = Annotated[str | None, typer.Option(help="DEBUG, INFO, WARNING, ERROR")]
RayOption = Annotated[
    bool,
    typer.Option(
        "--ray",
        help="replicas on Ray Serve (local Ray, or RAY_ADDRESS); needs the ray "
        "extra; see docs/serving-ray.md",
    ),
]
ReplicasOption = Annotated[
    int, typer.Option(min=1, help="with --ray: number of replicas")
]
WorkersOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="uvicorn worker processes, each loading the models (default 1); "
        "see docs/serving-workers.md",
    ),
]


def serve(
    host: HostOption = None,
    port: PortOption = None,
    model_dir: ModelDirOption = None,
    redis_url: RedisUrlOption = None,
    database_url: DatabaseUrlOption = None,
    models: ModelsOption = None,
    log_level: LogLevelOption = None,
    ray: RayOption = False,
    replicas: ReplicasOption = 2,
    workers: WorkersOption = None,
) -> None:
    """Serve the cost models (tile, layout, xla_cpu by default) over HTTP (see /docs)."""
    # The options given, by flat setting name: worker processes and Ray replicas
    # rebuild their Settings from these (and the environment) on their side.
    overrides: dict[str, Any] = {
        "host": host,
        "port": port,
        "model_dir": model_dir,
        "redis_url": redis_url,
        "database_url": database_url,
        "models": models,
        "log_level": log_level.upper() if log_level else None,
        "workers": workers,
    }
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from None
    configure_logging(settings.server.log_level)
    if ray:
        if settings.server.workers > 1:
            raise typer.BadParameter("--workers and --ray exclude each other")
        _serve_on_ray(settings, overrides, replicas)
    elif settings.server.workers > 1:
        run_workers(settings, overrides, GRACEFUL_SHUTDOWN_S)
    else:
        _serve_here(settings)


def _serve_here(settings: Settings) -> None:
    """One uvicorn server in this process."""
    # Imported here: with --workers the parent never loads onnxruntime (~90 MiB).
    from xla_costmodel.service.app import create_app

    uvicorn.run(
        create_app(settings),
        host=settings.server.host,
        port=settings.server.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )


def _serve_on_ray(settings: Settings, overrides: dict[str, Any], replicas: int) -> None:
    """Imports ray only here, so the plain server never needs it."""
    if importlib.util.find_spec("ray") is None:
        hint = install_hint("ray")
        typer.echo(f"costmodel serve --ray needs the ray extra: {hint}", err=True)
        raise typer.Exit(1)
    from xla_costmodel.service.ray_app import run_on_ray

    run_on_ray(settings, overrides, replicas)


if __name__ == "__main__":
    typer.run(serve)
