"""``isolate.forwarded_argv``: a command's parsed parameters as the argv its worker is
started with (``costmodel tune`` and ``costmodel collect`` re-run themselves as
``--worker``), parsed back to the same values."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from xla_costmodel import cli
from xla_costmodel.clients.xla import tune_cli
from xla_costmodel.clients.xla.isolate import forwarded_argv


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

    def supervise(argv: list[str], restarts: int, log: Any) -> int:
        started.append(argv)
        return 0

    monkeypatch.setattr(tune_cli, "supervise", supervise)
    # The command hands the token on through its environment: restored afterwards.
    monkeypatch.setenv("COSTMODEL_TOKEN", "")
    argv = ["tune", "f.py:g", "--strategy", "random", "--no-reuse", "--json"]
    argv += ["--rounds", "2", "--token", "t0k", "--restarts", "1"]
    result = CliRunner().invoke(cli.build_app(), argv)
    assert result.exit_code == 0, result.output
    assert os.environ["COSTMODEL_TOKEN"] == "t0k"  # to the worker, off its argv
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
