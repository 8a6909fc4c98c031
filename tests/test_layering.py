"""The package's layers, checked on its import graph (``imports.py``, as
``test_import_cycles.py`` is: every import counts, function-local ones included).

- ``service/core`` and ``service/store`` know nothing of HTTP: no import of the
  routes, the app, the HTTP error table (``service/errors.py``; the core raises
  ``service/core/errors.py``'s tree), FastAPI or Starlette.
- ``models/`` (training, export) imports nothing of ``clients/``.
- Command-line modules (``cli.py``, ``*_cli.py``) are leaves: only the command
  table, ``xla_costmodel/cli.py``, imports them (by name, when a command runs).
"""

from __future__ import annotations

from pathlib import Path

from imports import ROOT, Imports, imported_names, module_of, modules

THE_CLI = f"{ROOT}.cli"


def _under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _is_cli(module: str) -> bool:
    leaf = module.rpartition(".")[2]
    return leaf == "cli" or leaf.endswith("_cli")


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
            imported = module_of(target, found)
            if _is_cli(imported) and module not in (THE_CLI, imported):
                wrong.append(f"imports a command-line module: {where}")
    return sorted(wrong)


def test_the_layers_hold() -> None:
    found = modules()
    assert len(found) > 100  # the linked folders were followed
    report = violations(imported_names(found), found)
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
    report = violations(imported_names(found), found)
    assert [r.split(":")[0] for r in report] == [
        "core knows HTTP",
        "core knows HTTP",
        "imports a command-line module",
        "models import the client",
    ]
