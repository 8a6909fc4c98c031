"""Running a ``costmodel`` command in a child process, restarted after XLA crashes it.

Some XLA:CPU option sets crash XLA itself (a segfault compiling, or running the
executable the first time): nothing in the process can catch that. ``costmodel
tune`` and ``costmodel collect`` therefore do their work in a child process; the
restarted child finds the crashing config in its crash journal (``probe.Journal``)
and leaves it out. ``forwarded_argv`` rebuilds the child's command line from what the
parent's command parsed.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Collection
from enum import Enum
from typing import Any

import typer

Log = Callable[[str], None]


def forwarded_argv(ctx: typer.Context, omit: Collection[str] = ()) -> list[str]:
    """The running command (``ctx``) as arguments of ``costmodel``: its name under
    the root command, then every parameter it parsed but those named (by parameter
    name) in ``omit``, spelled so that parsing them again gives the same values:
    ``--x/--no-x`` flags by their side, a plain flag only when set, options whose
    value is None left out."""
    argv: list[str] = []
    at: Any = ctx  # typer's own click (vendored since 0.2x) or click's: same API
    while at.parent is not None:  # the root context is the program itself
        argv.insert(0, at.info_name or "")
        at = at.parent
    for param in ctx.command.params:
        if param.name is None or param.name in omit or not param.expose_value:
            continue
        argv += _spelled(param, ctx.params.get(param.name))
    return argv


def _spelled(param: Any, value: Any) -> list[str]:
    """One parameter's value as arguments (none for None, or a flag left unset).
    ``param``: a click ``Parameter``, from click or from typer's vendored copy,
    whose options and arguments are not click's classes: read by duck typing."""
    if value is None:
        return []
    if param.param_type_name == "argument":  # nargs != 1: a sequence of values
        return [_text(v) for v in (value if param.nargs != 1 else [value])]
    if param.param_type_name != "option" or getattr(param, "count", False):
        raise TypeError(f"cannot forward parameter {param.name!r}")
    name = max(param.opts, key=len)  # the long spelling
    if getattr(param, "is_flag", False):
        if param.secondary_opts:
            return [name if value else max(param.secondary_opts, key=len)]
        if value or not param.default:
            return [name] if value else []
        raise TypeError(f"cannot forward {param.name}=False: {name} has no off switch")
    values = list(value) if param.multiple else [value]
    if param.nargs != 1:  # each value a sequence of nargs items
        return [a for v in values for a in (name, *map(_text, v))]
    return [a for v in values for a in (name, _text(v))]


def _text(value: Any) -> str:
    return str(value.value if isinstance(value, Enum) else value)


def supervise(argv: list[str], restarts: int, log: Log) -> int:
    """Run ``costmodel *argv`` in a child process, again after each crash (signal)."""
    code = "from xla_costmodel.cli import main; main()"
    for attempt in range(restarts + 1):
        rc = subprocess.run([sys.executable, "-c", code, *argv], check=False).returncode
        if rc >= 0:  # finished, or failed in Python (a bug: restarting would not help)
            return rc
        log(f"worker killed by signal {-rc} (start {attempt + 1}); restarting")
    return 1
