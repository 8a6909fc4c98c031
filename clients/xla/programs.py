"""The programs a command names, and compiler options in a few words: shared by the
commands (``costmodel tune``, ``rank``, ``best``) and the studies that run them.

    load_program("FILE.py:NAME") -> (fn, args)    NAME() of FILE.py
    short(options) -> "ynn=DOT+REDUCE -fusion,cse sched=MEMORY ..."
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2

Program = tuple[Callable[..., Any], tuple[Any, ...]]


def load_program(spec: str) -> Program:
    """``NAME()`` of ``FILE.py`` (``spec`` = ``FILE.py:NAME``); BadParameter if not."""
    path_text, sep, name = spec.rpartition(":")
    path = Path(path_text)
    if not sep or not name or path.suffix != ".py" or not path.is_file():
        raise typer.BadParameter(
            f"expected FILE.py:NAME of an existing file, got {spec!r}"
        )
    module_spec = importlib.util.spec_from_file_location(f"_tune_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise typer.BadParameter(f"cannot import {path}")
    module = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, str(path.resolve().parent))  # the file may import its neighbours
    try:
        module_spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.resolve().parent))
    builder = getattr(module, name, None)
    if not callable(builder):
        raise typer.BadParameter(f"{path} has no function {name!r}")
    built = builder()
    if not (isinstance(built, tuple) and len(built) == 2 and callable(built[0])):
        raise typer.BadParameter(f"{name}() must return (fn, args), got {type(built)}")
    fn, args = built
    return fn, tuple(args)


def short(options: dict[str, xla_cpu.OptionValue]) -> str:
    """Compiler options (as ``CompilerOptions.flat`` spells them) in a few words:
    ``ynn=DOT+REDUCE -fusion,cse sched=MEMORY...``, each entry of the extra-options
    map as its own ``key=value``."""
    if not options:
        return "(default)"
    parts = []
    for key, value in options.items():
        if key == xla_cpu2.EXTRA_KEY:
            parts += [f"{k.removeprefix('xla_cpu_')}={v}" for k, v in _extra(value)]
        elif key == xla_cpu.YNN_KEY:
            names = [v.removeprefix(xla_cpu.YNN_PREFIX) for v in str(value).split(",")]
            parts.append("ynn=" + ("+".join(n for n in names if n) or "none"))
        elif key == xla_cpu.PASSES_KEY:
            parts.append(f"-{value}")
        elif key == xla_cpu.SCHEDULER_KEY:
            parts.append("sched=" + str(value).removeprefix(xla_cpu.SCHEDULER_PREFIX))
        else:
            parts.append(f"{key.removeprefix('xla_cpu_')}={value}")
    return " ".join(parts)


def _extra(spelled: xla_cpu.OptionValue) -> list[tuple[str, str]]:
    """The entries of an extra-options map spelled ``k=v,k=v`` (a badly spelled one,
    e.g. from a user's file, as one entry: shown, never parsed)."""
    try:
        flat = {xla_cpu2.EXTRA_KEY: spelled}
        return list(xla_cpu2.CompilerOptions.from_flat(flat).extra_options.items())
    except ValueError:
        return [(xla_cpu2.EXTRA_KEY, str(spelled))]
