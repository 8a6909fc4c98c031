"""No code branches on a collection's name: what differs between collections is declared
once in ``tpugraphs/collections.py`` and looked up (``get(name).per_node``, ...).

A comparison with a collection name (``collection == "tile"``, ``!= "layout"``,
``in ("tile", "layout")``) anywhere else fails this test, and so does dispatch keyed
by a name: a dict display with a collection name as a key (``{"tile": ...}``,
``dict(tile=...)``), a subscript with one (``sizes["layout"]``), a ``match`` case on
one, a comparison with a variable that loops over names (``for c in ("tile",
"layout"): ... x == c``). Naming a collection is fine (the shipped models are called tile and layout; the
CLI lists the registry's names; ``get("tile")`` looks the registry up); branching or
dispatching on the name is what a new collection would have to find and extend.
"""

from __future__ import annotations

import ast
from pathlib import Path

from xla_costmodel.tpugraphs.spec import COLLECTION_NAMES

REPO = Path(__file__).resolve().parents[1]
# Every folder the package links in (xla_costmodel/<name> -> ../<name>), and its own.
PACKAGES = (
    *sorted(p.name for p in (REPO / "xla_costmodel").iterdir() if p.is_symlink()),
    "xla_costmodel",
)
# path (from the repo root) -> why it may compare with a collection name.
ALLOWED = {
    "tpugraphs/collections.py": "the registry itself",
    "tpugraphs/spec.py": "the names' static type, Literal[...]",
    # Studies of the shipped tile and layout models: their reports' sections are
    # named for the two studies, not looked up for a collection.
    "studies/learning.py": "the tile and the layout study's results",
    "studies/learning_report.py": "the tile and the layout study's results",
}


def is_name(node: ast.AST | None) -> bool:
    """A collection name literal, or a tuple/list/set holding one."""
    if isinstance(node, ast.Constant):
        return node.value in COLLECTION_NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(is_name(e) for e in node.elts)
    return False


def name_variables(tree: ast.AST) -> set[str]:
    """Variables that loop over collection name literals (``for c in ("tile", ...)``)."""
    loops = [n for n in ast.walk(tree) if isinstance(n, ast.For | ast.comprehension)]
    return {
        loop.target.id
        for loop in loops
        if isinstance(loop.target, ast.Name) and is_name(loop.iter)
    }


def dispatches(node: ast.AST, variables: set[str]) -> bool:
    """Whether ``node`` compares with, or dispatches on, a collection name."""
    if isinstance(node, ast.Compare):
        sides = (node.left, *node.comparators)
        return any(
            is_name(e) or (isinstance(e, ast.Name) and e.id in variables) for e in sides
        )
    if isinstance(node, ast.Dict):  # {"tile": ..., "layout": ...}
        return any(is_name(k) for k in node.keys)
    if isinstance(node, ast.Subscript):  # table["tile"]
        return is_name(node.slice)
    if isinstance(node, ast.MatchValue):  # case "tile":
        return is_name(node.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id == "dict" and any(  # dict(tile=..., layout=...)
            k.arg in COLLECTION_NAMES for k in node.keywords
        )
    return False


def name_comparisons(source: str) -> list[int]:
    """Lines comparing with, or dispatching on, a collection name literal."""
    tree = ast.parse(source)
    variables = name_variables(tree)
    found = [n for n in ast.walk(tree) if dispatches(n, variables)]
    return sorted({getattr(n, "lineno", 0) for n in found})


def sources() -> list[Path]:
    files: list[Path] = []
    for package in PACKAGES:
        root = REPO / package
        # xla_costmodel/ links the other folders in: its own modules only.
        found = root.glob("*.py") if package == "xla_costmodel" else root.rglob("*.py")
        files += [p for p in found if "__pycache__" not in p.parts]
    return sorted(files)


def test_the_check_finds_each_form_of_comparison() -> None:
    code = (
        'a = x == "tile"\nb = "layout" != y\nc = z in ("tile", "layout")\n'
        'd = w == "xla_cpu"\ne = v == "tiles"\nf = get("tile").per_node\n'
    )
    assert name_comparisons(code) == [1, 2, 3, 4]


def test_the_check_finds_each_form_of_name_keyed_dispatch() -> None:
    code = (
        'a = {"tile": 1, "layout": 2}[name]\nb = sizes["layout"]\n'
        "match name:\n"
        '    case "xla_cpu":\n'
        "        pass\n"
        "c = dict(tile=1)\n"
        'd = {"tiles": 1}["tiles"]\ne = {k: 1 for k in ("tile",)}\n'
        'for c in ("layout", "tile"):\n'
        "    f = [g for g in gs if g.collection == c]\n"
        "    h = c\n"
    )
    assert name_comparisons(code) == [1, 2, 4, 6, 10]


def test_no_branches_on_collection_names_outside_the_registry() -> None:
    files = sources()
    assert len(files) > 100 and REPO / "tpugraphs" / "collections.py" in files
    found = []
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        if rel in ALLOWED:
            continue
        found += [f"{rel}:{line}" for line in name_comparisons(path.read_text())]
    assert not found, (
        "compares with a collection name; look up a declared property of "
        "xla_costmodel.tpugraphs.collections instead: " + ", ".join(found)
    )
