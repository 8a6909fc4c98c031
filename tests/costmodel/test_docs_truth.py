"""The docs say what the code does: every setting and ``costmodel serve`` flag is in
docs/settings.md, every ``costmodel`` command the help, README or docs name exists, and
the README's install table gives each command the extra the CLI asks for."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from xla_costmodel import cli, extras
from xla_costmodel.service.settings import Settings

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
SETTINGS = (REPO / "docs" / "settings.md").read_text()
DOCS = {p.name: p.read_text() for p in sorted((REPO / "docs").glob("*.md"))}
GROUPED = {
    f"{g} {c}": extra
    for g, (_, cs) in cli.GROUPS.items()
    for c, (_, extra) in cs.items()
}
EXTRA_OF = {**{name: extra for name, (_, extra) in cli.COMMANDS.items()}, **GROUPED}


def helped(*args: str) -> str:
    result = CliRunner().invoke(cli.build_app(), [*args, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def test_every_setting_is_in_the_settings_page() -> None:
    missing = [
        f"COSTMODEL_{name.upper()}"
        for name in Settings.flat_fields()
        if f"`COSTMODEL_{name.upper()}`" not in SETTINGS
    ]
    assert missing == []
    assert "docs/settings.md" in README  # and the README's index leads there


def test_every_serve_flag_is_in_the_settings_page() -> None:
    flags = set(re.findall(r"(--[a-z][a-z-]+)", helped("serve"))) - {"--help"}
    assert {"--host", "--port", "--workers"} <= flags
    assert sorted(f for f in flags if f not in SETTINGS) == []


def test_the_help_names_only_commands_that_exist() -> None:
    summary = helped().split("Learned cost model for XLA autotuners:")[1]
    named = re.findall(r"\b([a-z]+)\b", summary.split(".")[0])
    assert named and sorted(set(named) - set(cli.COMMANDS)) == []


def commands_named(text: str) -> set[str]:
    """Commands run in code: ``costmodel WORD`` (``costmodel GROUP WORD``) at the start
    of an inline code span or of a line in a fenced block (or after ``$(``, ``&&``)."""
    blocks = re.findall(r"```\w*\n(.*?)```", text, re.S)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    lines = [line for b in blocks for line in b.splitlines()] + spans
    pattern = (
        r"(?:^|\$\(|&& |; |\$ )\s*costmodel\s+([a-z][a-z-]*)(?:\s+([a-z][a-z-]*))?"
    )
    found = set()
    for line in lines:
        for first, second in re.findall(pattern, line):
            grouped = first in cli.GROUPS and second
            found.add(f"{first} {second}" if grouped else first)
    return found


def test_every_command_the_docs_name_exists() -> None:
    known = set(EXTRA_OF) | set(cli.GROUPS)
    named = {"README.md": commands_named(README)}
    named.update({name: commands_named(text) for name, text in DOCS.items()})
    assert {"serve", "rank", "tune", "tokens create"} <= named["README.md"]
    for name, commands in named.items():
        assert sorted(commands - known) == [], name


def install_table() -> dict[str, str]:
    """command -> the extra the README's install table installs for it."""
    table = README.split("## Install", 1)[1].split("\n## ", 1)[0]
    given = {}
    for row in table.splitlines():
        if not row.startswith("| `pip install"):
            continue
        install, _, commands = row.split("|")[1:4]
        extra = re.search(r"\[([\w,]+)\]", install)
        for command in re.findall(r"`([a-z][a-z ]*[a-z])`", commands):
            given[command] = extra.group(1) if extra else ""
    return given


def test_the_install_table_gives_each_command_its_extra() -> None:
    given = install_table()
    tops = {name.split()[0] for name in EXTRA_OF}
    listed = {c.split()[0] for c in given}
    assert sorted(tops - listed) == []  # every command is in the table
    for command, extra in given.items():
        if command in cli.GROUPS:  # a group: every command of it
            needed = {e for c, e in GROUPED.items() if c.split()[0] == command}
        else:
            needed = {EXTRA_OF[command]}
        # simulate's needs are not one extra: the table names the full run's, as
        # the command's own hint does ("pip install 'xla-costmodel[train,xla]'").
        needed = {extra_of_hint(e) for e in needed}
        assert needed == {extra}, (command, extra, needed)


def extra_of_hint(extra: str) -> str:
    found = re.search(r"\[([\w,]+)\]", extras.install_hint(extra)) if extra else None
    return found.group(1) if found else extra


def test_the_readme_lists_every_route_and_error_code() -> None:
    from xla_costmodel.service import errors
    from xla_costmodel.service.app import create_app

    api = README.split("## HTTP API", 1)[1].split("\n## ", 1)[0]
    paths = create_app(Settings()).openapi()["paths"]
    assert sorted(p for p in paths if f"{p.split('?')[0]}" not in api) == []
    codes = {
        cls.code
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.ServiceError)
    } - {errors.ServiceError.code}
    assert sorted(c for c in codes if f"`{c}`" not in api) == []


def test_the_fleet_refresh_period_the_docs_give_is_the_default() -> None:
    """README quick start (c) and docs/reference.md say how often /v1/targets is
    re-read: the setting's default."""
    period = Settings.flat_fields()["fleet_refresh_s"].default
    quickstart = README.split("## Quick start (c)", 1)[1].split("\n## ", 1)[0]
    assert f"every {period:g} s (`COSTMODEL_FLEET_REFRESH_S`)" in quickstart
    reference = DOCS["reference.md"].split("### `GET /v1/targets`", 1)[1]
    assert f"`COSTMODEL_FLEET_REFRESH_S` ({period:g} s)" in reference


def test_the_auto_feedback_auth_is_described_by_its_sockets() -> None:
    """``auto`` reads the sockets the process listens on (service/core/binding.py),
    never COSTMODEL_HOST: the settings page says so, and names that module."""
    row = next(r for r in SETTINGS.splitlines() if "`COSTMODEL_FEEDBACK_AUTH`" in r)
    assert "listens on" in row and "`service/core/binding.py`" in row
    assert "`COSTMODEL_HOST` does not" in row
    assert (REPO / "service" / "core" / "binding.py").is_file()
