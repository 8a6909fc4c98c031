"""The ``costmodel`` command: one typer app over the commands each package defines.

Each package owns its command functions (``models/cli.py``, ``service/cli.py``, ...);
this module only names them. They are imported when the app is built, never at import
time, and none of them imports torch until it runs.
"""

from __future__ import annotations

import importlib

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


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="costmodel",
        help="Learned cost model for XLA autotuners: train, serve, rank, replay, bench.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    for name, target in COMMANDS.items():
        module_name, func_name = target.split(":")
        module = importlib.import_module(module_name)
        app.command(name)(getattr(module, func_name))
    return app


def main() -> None:
    build_app()()
