"""The package's layers, checked on its import graph (``ast``, like
``test_import_cycles.py``: every import counts, function-local ones included).

- ``service/core`` and ``service/store`` know nothing of HTTP: no import of the
  routes, the app, the HTTP error table (``service/errors.py``; the core raises
  ``service/core/errors.py``'s tree), FastAPI or Starlette.
- ``models/`` (training, export) imports nothing of ``clients/``.
- Command-line modules (``cli.py``, ``*_cli.py``) are leaves: only the command
  table, ``xla_costmodel/cli.py``, imports them (by name, when a command runs).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "xla_costmodel"
ROOT = PACKAGE.name
THE_CLI = f"{ROOT}.cli"

Imports = dict[str, dict[str, int]]  # module -> {imported name: line}


def modules() -> dict[str, Path]:
    """Dotted name -> file, following the folders' symlinks into the package."""
    found: dict[str, Path] = {}
    for folder, _, files in os.walk(PACKAGE, followlinks=True):
        for name in files:
            if name.endswith(".py"):
                path = Path(folder) / name
                parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                found[".".join(parts)] = path
    return found


def _names(node: ast.AST, package: str) -> Iterator[str]:
    """Every dotted name an import brings in (``from a import b``: ``a.b``)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: up from this module's package
            parent = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*parent, base] if base else parent)
        yield from (f"{base}.{alias.name}" for alias in node.names)


def imports(found: dict[str, Path]) -> Imports:
    graph: Imports = {}
    for name, path in found.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _names(node, package):
                graph[name].setdefault(target, getattr(node, "lineno", 0))
    return graph


def _under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _is_cli(module: str) -> bool:
    leaf = module.rpartition(".")[2]
    return leaf == "cli" or leaf.endswith("_cli")


def _module(name: str, found: dict[str, Path]) -> str:
    """The module an imported name is, or is in ("" for none of the package's)."""
    while name and name not in found:
        name = name.rpartition(".")[0]
    return name


def violations(graph: Imports, found: dict[str, Path]) -> list[str]:
    core = (f"{ROOT}.service.core", f"{ROOT}.service.store")
    http = (
        f"{ROOT}.service.routes",
        f"{ROOT}.service.app",
        f"{ROOT}.service.errors",
        "fastapi",
        "starlette",
    )
    wrong = []
    for module, targets in graph.items():
        for target, line in targets.items():
            where = f"{module} -> {target} (line {line})"
            if _under(module, *core) and _under(target, *http):
                wrong.append(f"core knows HTTP: {where}")
            if _under(module, f"{ROOT}.models") and _under(target, f"{ROOT}.clients"):
                wrong.append(f"models import the client: {where}")
            imported = _module(target, found)
            if _is_cli(imported) and module not in (THE_CLI, imported):
                wrong.append(f"imports a command-line module: {where}")
    return sorted(wrong)


def test_the_layers_hold() -> None:
    found = modules()
    assert len(found) > 100  # the linked folders were followed
    report = violations(imports(found), found)
    assert not report, "layering:\n" + "\n".join(report)


def test_the_checker_finds_each_kind(tmp_path: Path) -> None:
    sources = {
        "service.core.x": "def f() -> None:\n    from ..errors import E\n",
        "service.store.y": "import starlette.requests\n",
        "models.m": f"from {ROOT}.clients import wire\n",
        "studies.s": f"from {ROOT}.clients.xla.tune_cli import short\n",
        "clients.xla.tune_cli": "",
        "service.errors": "",
        "cli": f"from {ROOT}.clients.xla import tune_cli\n",
    }
    found = {}
    for name, text in sources.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        found[f"{ROOT}.{name}"] = path
    report = violations(imports(found), found)
    assert [r.split(":")[0] for r in report] == [
        "core knows HTTP",
        "core knows HTTP",
        "imports a command-line module",
        "models import the client",
    ]
