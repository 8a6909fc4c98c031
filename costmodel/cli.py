"""The ``costmodel`` command: one typer app over the commands each package defines.

Each package owns its command functions (``models/cli.py``, ``service/cli.py``, ...);
this module only names them. They are imported when the app is built, never at import
time, and none of them imports torch until it runs.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer

# command name -> "module:function"
COMMANDS = {
    "train": "models.cli:train",
    "evaluate": "models.cli:evaluate",
    "export": "models.cli:export",
    "serve": "service.cli:serve",
    "replay": "clients.cli:replay",
    "featurize": "tpugraphs.hlo.cli:featurize",
    "bench": "benchmarks.cli:bench",
}

# group name -> (help, {command name -> "module:function"})
GROUPS = {
    "dataset": (
        "Datasets from the measurement database.",
        {"export": "costmodel.dataset:export"},
    ),
}


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="costmodel",
        help="Learned cost model for XLA autotuners: train, serve, rank, replay, bench.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    for name, target in COMMANDS.items():
        app.command(name)(_load(target))
    for group, (help_text, commands) in GROUPS.items():
        sub = typer.Typer(name=group, help=help_text, no_args_is_help=True)
        for name, target in commands.items():
            sub.command(name)(_load(target))
        app.add_typer(sub, name=group)
    return app


def _load(target: str) -> Any:
    module_name, func_name = target.split(":")
    return getattr(importlib.import_module(module_name), func_name)


def main() -> None:
    build_app()()
