"""The package's modules and what each imports, read with ``ast`` (nothing is
imported): the one walker of ``test_import_cycles.py`` and ``test_layering.py``.

Every ``import``/``from ... import`` counts, at module level, inside a function
or under ``TYPE_CHECKING``. ``from a import b`` brings in the name ``a.b``: the
submodule ``a.b`` when there is one, else a name of ``a`` (``module_of`` tells
which); a relative import is resolved up from the importing module's package.

    found = modules()             dotted name -> file, the linked folders included
    names = imported_names(found) module -> {imported name: line of its first import}
    module_of(name, found)        the module a name is, or is in ("" for none)
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "xla_costmodel"
ROOT = PACKAGE.name

Imports = dict[str, dict[str, int]]  # module -> {imported name: line}


def modules() -> dict[str, Path]:
    """Dotted name -> file, following the folders' symlinks into the package."""
    found: dict[str, Path] = {}
    for folder, _, files in os.walk(PACKAGE, followlinks=True):
        for name in files:
            if not name.endswith(".py"):
                continue
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


def imported_names(found: dict[str, Path]) -> Imports:
    """Each module's imported names, in the order first met (``ast.walk``), each
    with the line of its first import; every module of ``found`` has an entry."""
    graph: Imports = {}
    for name, path in found.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _names(node, package):
                graph[name].setdefault(target, getattr(node, "lineno", 0))
    return graph


def module_of(name: str, found: dict[str, Path]) -> str:
    """The module an imported name is, or is in ("" for none of ``found``)."""
    while name and name not in found:
        name = name.rpartition(".")[0]
    return name
