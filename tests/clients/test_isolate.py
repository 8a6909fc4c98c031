"""``isolate``: a command's parsed parameters as the argv its worker is started with
(``costmodel tune`` and ``costmodel collect`` re-run themselves as ``--worker``),
parsed back to the same values; the token handed to a child on its stdin, never
through its environment; a child killed by a signal restarted, the caller alive."""

from __future__ import annotations

import os
import signal
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from xla_costmodel import cli
from xla_costmodel.clients.xla import isolate, tune_cli
from xla_costmodel.clients.xla.isolate import ChildError, call, forwarded_argv


class Kind(StrEnum):
    fast = "fast"
    slow = "slow"


def _app(seen: list[tuple[dict[str, Any], list[str]]]) -> typer.Typer:
    """A root with one command of every kind of parameter, recording what it parsed
    and what it would forward."""
    app = typer.Typer()
    app.callback()(lambda: None)

    @app.command("run")
    def run(
        ctx: typer.Context,
        name: str = typer.Argument(...),
        n: int = typer.Option(1, "--n"),
        x: float | None = typer.Option(None, "--x"),
        flag: bool = typer.Option(False, "--flag"),
        on: bool = typer.Option(True, "--on/--off"),
        kind: Kind = typer.Option(Kind.fast, "--kind"),
        tags: list[str] = typer.Option([], "--tag"),
        path: Path = typer.Option(Path("."), "--path"),
        secret: str | None = typer.Option(None, "--secret"),
    ) -> None:
        seen.append((dict(ctx.params), forwarded_argv(ctx, omit=("secret",))))

    return app


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "a"],
        ["run", "b c", "--n", "-3", "--x", "0.25", "--flag", "--off"],
        ["run", "d", "--kind", "slow", "--tag", "p", "--tag", "q", "--path", "/t"],
        ["run", "e", "--secret", "s3", "--on", "--x", "1e-9"],
    ],
)
def test_the_forwarded_argv_parses_back_to_the_same_parameters(
    argv: list[str],
) -> None:
    seen: list[tuple[dict[str, Any], list[str]]] = []
    app = _app(seen)
    assert CliRunner().invoke(app, argv).exit_code == 0
    params, forwarded = seen[0]
    assert forwarded[0] == "run" and "--secret" not in forwarded
    assert CliRunner().invoke(app, forwarded).exit_code == 0
    again, _ = seen[1]
    assert again == {**params, "secret": None}


def test_tune_forwards_its_options_but_the_token_to_its_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[list[str]] = []
    tokens: list[str | None] = []

    def supervise(
        argv: list[str], restarts: int, log: Any, *, token: str | None = None
    ) -> int:
        started.append(argv)
        tokens.append(token)
        return 0

    monkeypatch.setattr(tune_cli, "supervise", supervise)
    monkeypatch.delenv("COSTMODEL_TOKEN", raising=False)
    argv = ["tune", "f.py:g", "--strategy", "random", "--no-reuse", "--json"]
    argv += ["--rounds", "2", "--token", "t0k", "--restarts", "1"]
    result = CliRunner().invoke(cli.build_app(), argv)
    assert result.exit_code == 0, result.output
    assert tokens == ["t0k"]  # handed to the worker explicitly, off its argv
    assert "COSTMODEL_TOKEN" not in os.environ  # and never through the environment
    assert started == [
        [
            "tune",
            "f.py:g",
            "--server",
            "http://127.0.0.1:8000",
            "--budget",
            "8",
            "--strategy",
            "random",
            "--seed",
            "0",
            "--candidates",
            "256",
            "--rounds",
            "2",
            "--model",
            "xla_cpu",
            "--json",
            "--no-reuse",
            "--min-writers",
            "1",
            "--spec",
            "xla_cpu/2",
            "--worker",
        ]
    ]


def test_collect_forwards_its_options_to_its_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from xla_costmodel.collection import collect

    started: list[list[str]] = []
    monkeypatch.setattr(collect, "supervise", lambda argv, *_: started.append(argv))
    argv = ["collect", "--out", str(tmp_path), "--no-pin", "--cpu", "-1"]
    result = CliRunner().invoke(cli.build_app(), [*argv, "--restarts", "2"])
    assert result.exit_code == 0, result.output
    assert started == [
        [
            *argv[:3],
            "--programs",
            "",
            "--configs",
            "100",
            "--spec",
            "xla_cpu/2",
            "--time-budget",
            "4500.0",
            "--seed",
            "0",
            "--controls",
            "2",
            "--runs",
            "3",
            "--max-rounds",
            "5",
            "--noise-threshold",
            "0.05",
            "--cpu",
            "-1",
            "--no-pin",
            "--worker",
        ]
    ]


def test_a_child_gets_the_token_on_stdin_not_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COSTMODEL_TOKEN", "inherited-secret")
    monkeypatch.setenv("COSTMODEL_LOG_LEVEL", "WARNING")
    answer = call(f"{isolate.__name__}:seen", {"x": 1}, token="given")
    assert answer.pid != os.getpid()
    assert answer.value == {"token": True, "request": {"x": 1}}
    assert "COSTMODEL_LOG_LEVEL" in answer.environment  # the rest is inherited
    assert "COSTMODEL_TOKEN" not in answer.environment
    none = call(f"{isolate.__name__}:seen", {})
    assert none.value["token"] is False  # no token passed: none at all


def segfault(job: isolate.Job) -> None:
    """A child function that dies as XLA does on a bad config."""
    os.kill(os.getpid(), signal.SIGSEGV)


def test_a_child_killed_by_a_signal_is_restarted_and_the_caller_lives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines: list[str] = []
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))  # this module
    with pytest.raises(ChildError) as raised:
        call("test_isolate:segfault", {}, restarts=1, log=lines.append)
    assert raised.value.signal == 11
    assert len(lines) == 2 and all("killed by signal 11" in x for x in lines)
    with pytest.raises(ChildError, match="failed") as failed:
        call("os:getcwd", {})  # a Python error: not restarted, no signal
    assert failed.value.signal is None
