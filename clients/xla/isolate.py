"""Work in a child process: whatever XLA crashes there, the caller lives on.

    supervise(argv, restarts, log, token=...) -> exit code    ``costmodel ARGV``
    call(function, request, files, token=..., restarts=...) -> Answer   one function
    worker_token() -> str | None      in a ``--worker``: the token its parent sent
    forwarded_argv(ctx, omit) -> argv    a parsed command, spelled for its worker

Some XLA:CPU option sets crash XLA itself (a segfault compiling, or running the
executable the first time): nothing in the process can catch that. ``costmodel
tune``, ``costmodel collect``, ``jit(..., budget > 0)`` and the tuner's final
confirmation (``confirm.py``) therefore do that work in a child process, all through
``_spawn``: the child gets a copy of the environment *without* the writer token
(``COSTMODEL_TOKEN``), and the token, if any, as the first line of its stdin (never
its argv: ``ps`` shows that). A child killed by a signal is started again
(``restarts``); the restarted one finds the crashing config in its crash journal
(``probe.Journal``) and leaves it out.

``call`` runs ``module:function`` with one ``Job`` (the JSON ``request``, a
private working directory holding ``files``, the token) in ``python -m`` of this
module, and returns its JSON answer with the child's pid and the names of the
``COSTMODEL_*`` variables it saw.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import typer

Log = Callable[[str], None]
TOKEN_ENV = "COSTMODEL_TOKEN"
CLI = "from xla_costmodel.cli import main; main()"
ANSWER = "answer.json"
OUTPUT = "output.txt"  # the child's stdout and stderr: never the caller's


class ChildError(RuntimeError):
    """A child process did not answer: ``signal`` when a signal killed it (every
    restart too), else its exit code is in the message."""

    def __init__(self, message: str, signal: int | None = None) -> None:
        super().__init__(message)
        self.signal = signal


@dataclass(frozen=True, kw_only=True)
class Job:
    """What a child function gets: the caller's ``request`` (JSON), a private
    ``workdir`` holding the caller's files, and the writer ``token`` (or None)."""

    request: dict[str, Any]
    workdir: Path
    token: str | None


@dataclass(frozen=True, kw_only=True)
class Answer:
    """A child function's JSON answer, the child's ``pid`` and the names of the
    ``COSTMODEL_*`` environment variables it saw (the token is never one)."""

    value: Any
    pid: int
    environment: tuple[str, ...]


def child_environment() -> dict[str, str]:
    """This process's environment minus the writer token: what a child inherits."""
    return {k: v for k, v in os.environ.items() if k != TOKEN_ENV}


def _spawn(
    argv: list[str], first_line: dict[str, Any], output: Path | None = None
) -> int:
    """``python ARGV`` with ``first_line`` (JSON, the token in it) on its stdin,
    its stdout and stderr into ``output`` (None: the caller's); its return code
    (negative: the signal that killed it)."""
    with open(output, "wb") if output else open(os.devnull, "wb") as out:
        done = subprocess.run(
            [sys.executable, *argv],
            input=(json.dumps(first_line) + "\n").encode(),
            env=child_environment(),
            stdout=out if output else None,
            stderr=out if output else None,
            check=False,
        )
    return done.returncode


def supervise(
    argv: list[str], restarts: int, log: Log, *, token: str | None = None
) -> int:
    """Run ``costmodel *argv`` in a child process, again after each crash (signal);
    the child reads ``token`` with ``worker_token()``."""
    for attempt in range(restarts + 1):
        rc = _spawn(["-c", CLI, *argv], {"token": token})
        if rc >= 0:  # finished, or failed in Python (a bug: restarting would not help)
            return rc
        log(f"worker killed by signal {-rc} (start {attempt + 1}); restarting")
    return 1


def worker_token() -> str | None:
    """In a child of ``supervise``: the token its parent wrote on stdin (None when
    there is none, or stdin is a terminal: the worker was started by hand)."""
    if sys.stdin is None or sys.stdin.isatty():
        return None
    line = sys.stdin.readline()
    try:
        token = json.loads(line).get("token") if line.strip() else None
    except (ValueError, AttributeError):
        return None
    return token if isinstance(token, str) and token else None


def call(
    function: str,
    request: Mapping[str, Any],
    files: Mapping[str, bytes] | None = None,
    *,
    token: str | None = None,
    restarts: int = 0,
    log: Log | None = None,
) -> Answer:
    """``function`` (``"package.module:name"``, taking a ``Job``) in a child
    process, started again after a crash up to ``restarts`` times; its answer.
    Raises ``ChildError`` when it never answers."""
    with tempfile.TemporaryDirectory(prefix="costmodel-child-") as tmp:
        workdir = Path(tmp)
        for name, data in (files or {}).items():
            (workdir / name).write_bytes(data)
        header = {
            "function": function,
            "request": dict(request),
            "workdir": tmp,
            "token": token,
        }
        argv = ["-m", "xla_costmodel.clients.xla.isolate"]
        for attempt in range(restarts + 1):
            rc = _spawn(argv, header, workdir / OUTPUT)
            if rc == 0:
                body = json.loads((workdir / ANSWER).read_text())
                return Answer(
                    value=body["value"],
                    pid=int(body["pid"]),
                    environment=tuple(body["environment"]),
                )
            if rc > 0:
                raise ChildError(f"{function} failed: {_tail(workdir / OUTPUT)}")
            if log is not None:
                log(f"{function}: killed by signal {-rc} (start {attempt + 1})")
        raise ChildError(f"{function}: killed by signal {-rc}", signal=-rc)


def _tail(path: Path, limit: int = 600) -> str:
    text = path.read_text(errors="replace").strip() if path.exists() else ""
    return text[-limit:] or "no output"


def _child_main() -> None:
    """``python -m`` of this module: run the job on stdin, write its answer."""
    header = json.loads(sys.stdin.readline())
    module, _, name = str(header["function"]).partition(":")
    function = getattr(importlib.import_module(module), name)
    workdir = Path(header["workdir"])
    job = Job(request=header["request"], workdir=workdir, token=header["token"])
    value = function(job)
    answer = {
        "value": value,
        "pid": os.getpid(),
        "environment": sorted(k for k in os.environ if k.startswith("COSTMODEL_")),
    }
    partial = workdir / (ANSWER + ".part")
    partial.write_text(json.dumps(answer))
    partial.replace(workdir / ANSWER)


def seen(job: Job) -> dict[str, Any]:
    """A child function that answers what a child sees: whether it got a token
    (from its parent, on stdin) and its request back (``call``'s own check)."""
    return {"token": job.token is not None, "request": job.request}


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


if __name__ == "__main__":
    _child_main()
