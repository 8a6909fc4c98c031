"""No code branches on a collection's name: what differs between collections is declared
once in ``tpugraphs/collections.py`` and looked up (``get(name).per_node``, ...).

A comparison with a collection name (``collection == "tile"``, ``!= "layout"``,
``in ("tile", "layout")``) anywhere else fails this test. Naming a collection is fine
(the shipped models are called tile and layout; the CLI lists the registry's names);
branching on the name is what a new collection would have to find and extend.
"""

from __future__ import annotations

import ast
from pathlib import Path

from xla_costmodel.tpugraphs.spec import COLLECTION_NAMES

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("service", "clients", "models", "tpugraphs", "benchmarks", "xla_costmodel")
# path (from the repo root) -> why it may compare with a collection name.
ALLOWED = {
    "tpugraphs/collections.py": "the registry itself",
}


def name_comparisons(source: str) -> list[int]:
    """Lines comparing something with a collection name literal (or a tuple of them)."""

    def is_name(node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in COLLECTION_NAMES
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(is_name(e) for e in node.elts)
        return False

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(
            is_name(e) for e in (node.left, *node.comparators)
        ):
            lines.append(node.lineno)
    return lines


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
        'd = w == "xla_cpu"\ne = v == "tiles"\nf = {"tile": 1}\n'
    )
    assert name_comparisons(code) == [1, 2, 3, 4]


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
