"""The README documents every setting and every ``costmodel serve`` flag."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from xla_costmodel import cli
from xla_costmodel.service.settings import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_setting_is_in_the_readme() -> None:
    missing = [
        f"COSTMODEL_{name.upper()}"
        for name in Settings.model_fields
        if f"`COSTMODEL_{name.upper()}`" not in README
    ]
    assert missing == []


def test_every_serve_flag_is_in_the_readme() -> None:
    result = CliRunner().invoke(
        cli.build_app(), ["serve", "--help"], terminal_width=200
    )
    assert result.exit_code == 0, result.output
    flags = set(re.findall(r"(--[a-z][a-z-]+)", result.output)) - {"--help"}
    assert {"--host", "--port", "--workers"} <= flags
    assert sorted(f for f in flags if f not in README) == []
