"""The package's import graph has no cycle, hidden or not; clients/ never imports
collection/, and only the runs (bench/, chaos/, studies/) import the process harness.

Every module of ``xla_costmodel`` (the linked folders included) is parsed with ``ast``
(``imports.py``); every ``import``/``from ... import`` of ``xla_costmodel.*`` counts,
at module level or inside a function (a function-local import is the usual way to
hide a cycle) or under ``TYPE_CHECKING``. ``from pkg import name`` counts as an
import of the submodule ``pkg.name`` when there is one, else of ``pkg`` itself (its
``__init__``).

Not counted: the implicit import of a parent package before its submodule. A package
``__init__`` re-exporting its submodules (``clients/__init__.py``) would otherwise
close a "cycle" with each of them, although the parent never needs a name of the
submodule that is not defined yet; a submodule that really reads a name of its
parent's ``__init__`` writes ``from xla_costmodel.pkg import Name``, which is counted.
Nor the command table of ``xla_costmodel/cli.py`` (module names as strings, imported
when a command runs).
"""

from __future__ import annotations

from pathlib import Path

from imports import PACKAGE, ROOT, imported_names, module_of, modules

Graph = dict[str, dict[str, int]]  # module -> {imported module: line of the import}


def import_graph(found: dict[str, Path]) -> Graph:
    """The package's modules each imports (not itself), from ``imports.py``'s names."""
    graph: Graph = {name: {} for name in found}
    for name, names in imported_names(found).items():
        for imported, line in names.items():
            target = module_of(imported, found)  # a name, or the module it is in
            if target.startswith(ROOT) and target != name:
                graph[name].setdefault(target, line)
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def describe(component: list[str], graph: Graph, found: dict[str, Path]) -> str:
    """The component's edges, each with the file and line of its import."""
    lines = [" <-> ".join(component)]
    for module in component:
        for target, line in sorted(graph[module].items()):
            if target in component:
                where = found[module].relative_to(PACKAGE.parent)
                lines.append(f"  {module} -> {target}  ({where}:{line})")
    return "\n".join(lines)


def test_no_import_cycle_even_through_function_local_imports() -> None:
    found = modules()
    graph = import_graph(found)
    assert len(found) > 100  # the linked folders were followed
    report = [describe(c, graph, found) for c in cycles(graph)]
    assert not report, "import cycles:\n" + "\n".join(report)


def test_the_client_never_imports_the_collection_tooling() -> None:
    graph = import_graph(modules())
    wrong = [
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.startswith(f"{ROOT}.clients")
        for target in targets
        if target.startswith(f"{ROOT}.collection")
    ]
    assert not wrong, wrong


# Who may start processes: the runs and the harness itself (the tests import it too).
HARNESS_USERS = ("bench", "chaos", "studies", "harness")


def test_only_the_runs_import_the_process_harness() -> None:
    """The harness (``harness/``) starts servers for the bench, the chaos run and the
    studies; the root package, the service, the client and the rest never import it,
    and it imports nothing of the package but itself."""
    graph = import_graph(modules())
    harness = f"{ROOT}.harness"
    users = tuple(f"{ROOT}.{p}" for p in HARNESS_USERS)
    wrong = [
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if (target.startswith(harness) and not module.startswith(users))
        or (module.startswith(harness) and not target.startswith(harness))
    ]
    assert not wrong, wrong
    assert f"{ROOT}.procs" not in graph  # the root package holds no process code


def test_the_checker_finds_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    sources = {
        "one": f"from {ROOT}.two import X\n",
        "two": f"def f() -> None:\n    from {ROOT} import three\n",
        "three": "def g() -> None:\n    from . import one\n",
        "four": f"import {ROOT}.one\n",
    }
    found = {}
    for name, text in sources.items():
        (tmp_path / f"{name}.py").write_text(text)
        found[f"{ROOT}.{name}"] = tmp_path / f"{name}.py"
    graph = import_graph(found)
    assert graph[f"{ROOT}.three"] == {f"{ROOT}.one": 2}
    assert cycles(graph) == [[f"{ROOT}.{m}" for m in ("one", "three", "two")]]
    del found[f"{ROOT}.three"]
    assert cycles(import_graph(found)) == []
