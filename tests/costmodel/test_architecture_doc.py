"""docs/architecture.md names only code that exists.

Every backticked ``path/to/module.py`` (from the repository root, or from
``service/``, as the page abbreviates ``core/...`` and ``routes/...``) is a file;
every bare ``module.py`` is one somewhere in the packages; every ``Name.attr``
(``Class.method``, ``module.function``) is defined there: a class ``Name`` with
``attr`` (a method, a field, a class attribute), or a module ``Name.py`` with a
top-level ``attr``; every backticked ``CamelCase`` name is a class or alias.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[2]
PAGE = (REPO / "docs" / "architecture.md").read_text()
PACKAGES = ("service", "clients", "tpugraphs", "models", "studies", "bench", "chaos")
PATH = re.compile(r"^[\w./]+\.py$")
DOTTED = re.compile(r"^([A-Za-z_]\w*)\.([A-Za-z_]\w*)$")
CLASS = re.compile(r"^[A-Z][a-z]+[A-Z]\w*$|^[A-Z][a-z]+$")


def named() -> list[str]:
    """The backticked names of the page, outside its code blocks, without calls'
    arguments (``tune(fn, args, config)`` is ``tune``)."""
    prose = re.sub(r"^```.*?^```", "", PAGE, flags=re.M | re.S)
    return [name.split("(")[0] for name in re.findall(r"`([^`\n]+)`", prose)]


def sources() -> list[Path]:
    found = [p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")]
    return found + sorted((REPO / "xla_costmodel").glob("*.py"))


@cache
def index() -> tuple[dict[str, set[str]], dict[str, set[str]], dict[str, set[str]]]:
    """Top-level names per module basename, attributes and bases per class name
    (merged over same-named modules and classes)."""
    modules: dict[str, set[str]] = defaultdict(set)
    classes: dict[str, set[str]] = defaultdict(set)
    bases: dict[str, set[str]] = defaultdict(set)
    for path in sources():
        tree = ast.parse(path.read_text(), str(path))
        names = modules[path.stem]
        for node in tree.body:
            names.update(_defined(node))
            if isinstance(node, ast.ClassDef):
                bases[node.name].update(ast.unparse(b) for b in node.bases)
                for member in ast.walk(node):
                    if member is not node:
                        classes[node.name].update(_member(member))
    return modules, classes, bases


def _defined(node: ast.AST) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.ImportFrom):  # re-exported (``tune_report.Failed``)
        return {alias.asname or alias.name for alias in node.names}
    return set()


def _member(node: ast.AST) -> set[str]:
    """A class's own names, and the ``self.x`` its methods assign."""
    if isinstance(node, ast.ImportFrom):
        return set()
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    own = {
        t.attr
        for t in targets
        if isinstance(t, ast.Attribute)
        and isinstance(t.value, ast.Name)
        and t.value.id == "self"
    }
    return own | _defined(node)


def has(owner: str, attr: str) -> bool:
    """Whether class or module ``owner`` defines ``attr``, itself or through a base
    (pydantic's ``BaseModel`` for the wire schemas)."""
    modules, classes, bases = index()
    if attr in modules.get(owner, set()):
        return True
    seen, todo = set(), [owner]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if attr in classes.get(name, set()):
            return True
        if name == "BaseModel" and hasattr(BaseModel, attr):
            return True
        todo += bases.get(name, set())
    return False


def test_every_module_path_named_exists() -> None:
    paths = [n for n in named() if PATH.match(n)]
    assert len(paths) > 20, "the page names its modules"
    files = {p.name for p in sources()}
    missing = [
        p
        for p in paths
        if not (
            (REPO / p).is_file()
            or (REPO / "service" / p).is_file()
            or ("/" not in p and p in files)
        )
    ]
    assert missing == []


def test_every_function_and_method_named_exists() -> None:
    dotted = [m.groups() for n in named() if (m := DOTTED.match(n)) and m[2] != "py"]
    assert len(dotted) > 40, "the page names its functions"
    missing = [f"{owner}.{attr}" for owner, attr in dotted if not has(owner, attr)]
    assert missing == []


def test_every_class_named_exists() -> None:
    modules, _, _ = index()
    defined = set().union(*modules.values())
    missing = sorted({n for n in named() if CLASS.match(n) and n not in defined})
    assert missing == []


def test_the_old_generations_api_is_gone() -> None:
    """The bus replaced the listener registry: the page must not send a reader to
    the methods ``Generations`` no longer has."""
    assert not has("Generations", "wrote")
    assert "Generations.wrote" not in PAGE
