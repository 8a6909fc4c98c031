"""The ``costmodel`` command: one typer app over the commands each package defines.

Each package owns its command functions (``models/cli.py``, ``service/cli.py``, ...);
this module only names them, with the extra each needs. A command whose extra is not
installed is still listed, and running it prints one line naming the extra to install
(exit 1) instead of an ImportError. Command modules are imported when the app is built,
never at import time, and none of them imports torch until it runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import typer

from xla_costmodel import DISTRIBUTION, version
from xla_costmodel.extras import install_hint, missing, needs

# command name -> ("module:function", extra)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("xla_costmodel.models.cli:train", "train"),
    "evaluate": ("xla_costmodel.models.cli:evaluate", "train"),
    "export": ("xla_costmodel.models.cli:export", "train"),
    "serve": ("xla_costmodel.service.cli:serve", "service"),
    "rank": ("xla_costmodel.clients.rank_cli:rank", ""),
    "replay": ("xla_costmodel.clients.cli:replay", ""),
    "featurize": ("xla_costmodel.tpugraphs.hlo.cli:featurize", ""),
    "bench": ("xla_costmodel.bench.cli:bench", "bench"),
    "chaos": ("xla_costmodel.chaos.cli:chaos", "bench"),
    "collect": ("xla_costmodel.collection.collect:collect", "xla"),
    "tune": ("xla_costmodel.clients.xla.tune_cli:tune", "xla"),
    "best": ("xla_costmodel.clients.xla.best_cli:best", "xla"),
    "simulate": ("xla_costmodel.studies.simulate_cli:simulate", "simulate"),
}
# group name -> (help, {command name -> ("module:function", extra)})
GROUPS: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    "dataset": (
        "Datasets from the measurement database.",
        {"export": ("xla_costmodel.dataset:export", "service")},
    ),
    "tokens": (
        "Writers: who may store measurements (docs/security.md).",
        {
            "create": ("xla_costmodel.service.admin_cli:create", "service"),
            "list": ("xla_costmodel.service.admin_cli:list_writers", "service"),
            "revoke": ("xla_costmodel.service.admin_cli:revoke", "service"),
        },
    ),
    "measurements": (
        "Measurements in the database.",
        {"purge": ("xla_costmodel.service.admin_cli:purge", "service")},
    ),
}
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="costmodel",
        help="Learned cost model for XLA autotuners: train, serve, rank, replay, bench.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    for name, (target, extra) in COMMANDS.items():
        _register(app, name, target, extra)
    for group, (help_text, commands) in GROUPS.items():
        sub = typer.Typer(name=group, help=help_text, no_args_is_help=True)
        for name, (target, extra) in commands.items():
            _register(sub, name, target, extra, f"{group} {name}")
        app.add_typer(sub, name=group)
    return app


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"{DISTRIBUTION} {version()}")
        raise typer.Exit()


def _root(
    show_version: bool = typer.Option(
        False,
        "--version",
        help="Print the version and exit.",
        is_eager=True,
        callback=_print_version,
    ),
) -> None:
    """Learned cost model for XLA autotuners."""


def _register(
    app: typer.Typer, name: str, target: str, extra: str, full: str | None = None
) -> None:
    if missing(extra):
        hint = install_hint(extra)
        app.command(name, help=f"(needs {hint})", context_settings=PASS_THROUGH)(
            _needs(full or name, extra)
        )
        return
    app.command(name)(_load(target))


def _needs(command: str, extra: str) -> Callable[[typer.Context], None]:
    def needs_extra(ctx: typer.Context) -> None:
        typer.echo(needs(command, extra), err=True)
        raise typer.Exit(1)

    return needs_extra


def _load(target: str) -> Any:
    module_name, func_name = target.split(":")
    return getattr(importlib.import_module(module_name), func_name)


def main() -> None:
    build_app()()
