"""Sizes, bounded by a check rather than by convention (docs/development.md, "Lint"):
no module of the package over 400 lines, no function over 60.

Every module of ``xla_costmodel`` counts, the linked folders included (``imports.py``'s
walk), read with ``ast``. A module's size is its line count; a function's runs from
its ``def`` to its last line (a nested function counts in its own right and in the
function around it). Outside the bounds are only:

- alembic migrations (``migrations/``): history, written once and never grown;
- a data table that says so at its top: its module docstring holds
  ``Over 400 lines on purpose:`` and a reason naming it a data table
  (``collection/zoo.py``);
- a function with a comment on the line above its ``def`` (above its decorators, if
  any) that reads ``# Over 60 lines`` and then its reason, in a few words.

An exemption that no longer exempts anything (the function or module shrank) is an
offence too, so the list stays true. The test prints the exemptions in force (shown
with ``pytest -rP``, and with any failure).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from imports import ROOT, modules

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MODULE_EXEMPTION = re.compile(
    r"Over 400 lines on purpose:(?P<reason>.+?)(?:\n\s*\n|$)", re.S
)
FUNCTION_EXEMPTION = re.compile(r"#\s*Over 60 lines\b(?P<reason>.*)$")
MIN_REASON_WORDS = 3
Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True, kw_only=True)
class Sizes:
    """What the check found: offences (the test fails on any) and exemptions."""

    offences: list[str] = field(default_factory=list)
    exemptions: list[str] = field(default_factory=list)


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, Function]]:
    """Every function and method with its qualified name, nested ones included."""
    found: list[tuple[str, Function]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{node.name}"
            found.append((name, node))
            found += _functions(node, f"{name}.")
        elif isinstance(node, ast.ClassDef):
            found += _functions(node, f"{prefix}{node.name}.")
        else:
            found += _functions(node, prefix)
    return found


def _reason(text: str) -> str:
    """An exemption's reason, or "" when it gives none (fewer than a few words)."""
    words = re.sub(r"\s+", " ", text).strip(" :;,.-\u2014#")
    return words if len(words.split()) >= MIN_REASON_WORDS else ""


def _function_exemption(lines: list[str], node: Function) -> str | None:
    """The reason given above ``node`` ("" for a comment without one), or None."""
    top = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    match = FUNCTION_EXEMPTION.match(lines[top - 2].strip()) if top > 1 else None
    return None if match is None else _reason(match["reason"])


def _module_exemption(tree: ast.Module) -> str | None:
    """The reason a data table gives at its top ("" for one without), or None."""
    match = MODULE_EXEMPTION.search(ast.get_docstring(tree) or "")
    if match is None:
        return None
    reason = _reason(match["reason"])
    return reason if "data table" in reason else ""


def _check_module(name: str, text: str, out: Sizes) -> None:
    tree, lines = ast.parse(text), text.splitlines()
    size = len(lines)
    reason = _module_exemption(tree)
    if reason:
        out.exemptions.append(f"{name}: {size} lines: {reason}")
        if size <= MAX_MODULE_LINES:
            out.offences.append(f"{name}: exempt but {size} lines: drop the note")
    elif reason == "":
        out.offences.append(f"{name}: 'Over 400 lines on purpose' names no data table")
    elif size > MAX_MODULE_LINES:
        out.offences.append(f"{name}: {size} lines (at most {MAX_MODULE_LINES})")
    for qualname, node in _functions(tree):
        where = f"{name}:{node.lineno} {qualname}()"
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        why = _function_exemption(lines, node)
        if why:
            out.exemptions.append(f"{where}: {length} lines: {why}")
            if length <= MAX_FUNCTION_LINES:
                out.offences.append(
                    f"{where}: exempt but {length} lines: drop the comment"
                )
        elif why == "":
            out.offences.append(f"{where}: '# Over 60 lines' without a reason")
        elif length > MAX_FUNCTION_LINES:
            out.offences.append(
                f"{where}: {length} lines (at most {MAX_FUNCTION_LINES})"
            )


def sizes(found: dict[str, Path]) -> Sizes:
    """Check every module of ``found`` but the migrations."""
    out = Sizes()
    for name, path in sorted(found.items()):
        if "migrations" not in name.split("."):
            _check_module(name, path.read_text(), out)
    return out


def test_no_module_over_400_lines_and_no_function_over_60() -> None:
    found = modules()
    assert f"{ROOT}.collection.zoo" in found  # the linked folders were followed
    report = sizes(found)
    listed = "exemptions in force:\n" + "\n".join(report.exemptions or ["(none)"])
    print(listed)
    if report.offences:
        offences = "\n".join(report.offences)
        pytest.fail(f"over the bounds:\n{offences}\n{listed}", pytrace=False)


def test_the_check_finds_each_kind(tmp_path: Path) -> None:
    body = "    x = 1\n" * 60
    reason = "# Over 60 lines for its options only (one parameter per flag)\n"
    sources = {
        "long_function": f"def f() -> None:\n{body}",
        "exempt": f"import typer\n\n{reason}@typer.command()\ndef g() -> None:\n{body}",
        "no_reason": f"# Over 60 lines\ndef h() -> None:\n{body}",
        "stale": f"{reason}def k() -> None:\n    pass\n",
        "method": "class C:\n    def m(self) -> None:\n" + "        x = 1\n" * 61,
        "long_module": "x = 1\n" * 401,
        "table": '"""Over 400 lines on purpose: the module is a data table of programs."""\n'
        + "x = 1\n" * 400,
        "not_a_table": '"""Over 400 lines on purpose: it grew."""\n' + "x = 1\n" * 400,
        "service.store.migrations.versions.v1": "x = 1\n" * 401,
        "short": "def f() -> None:\n    pass\n",
    }
    found = {}
    for name, text in sources.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        found[f"{ROOT}.{name}"] = path
    report = sizes(found)
    assert [o.split(": ", 1)[1] for o in report.offences] == [
        "61 lines (at most 60)",
        "401 lines (at most 400)",
        "62 lines (at most 60)",
        "'# Over 60 lines' without a reason",
        "'Over 400 lines on purpose' names no data table",
        "exempt but 2 lines: drop the comment",
    ]
    assert [e.split(": ")[0] for e in report.exemptions] == [
        f"{ROOT}.exempt:5 g()",
        f"{ROOT}.stale:2 k()",
        f"{ROOT}.table",
    ]
