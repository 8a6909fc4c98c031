"""TpuGraphs node order of a parsed module, and its operand and call edges.

Nodes are all instructions of all computations: computations in printed order (XLA
prints callees first, in the post order the 2023 protos used) and, inside each,
XLA's instruction post order recomputed from the text. For scheduled modules that
undoes the schedule order, which is what makes the text match the protos.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from xla_costmodel.tpugraphs.hlo import attributes as attr
from xla_costmodel.tpugraphs.hlo.errors import HloParseError
from xla_costmodel.tpugraphs.hlo.ir import HloComputation, HloInstruction, HloModule


@dataclass(frozen=True)
class NodeTable:
    """Instructions in node order with their references resolved to node ids."""

    instructions: list[HloInstruction]
    is_root: list[bool]
    operands: list[list[int]]  # node ids in operand order; may repeat
    callee_roots: list[list[int]]  # root node id of each called computation
    computation_names: list[str]
    computation_ends: list[int]  # node count after each computation


def node_table(module: HloModule) -> NodeTable:
    """Order the module's instructions; raises HloParseError on dangling names/cycles."""
    comp_ids = _computation_ids(module)
    ordered: list[HloInstruction] = []
    operands: list[list[int]] = []
    is_root: list[bool] = []
    ends: list[int] = []
    roots: list[int] = []  # root node id of each computation
    for comp in module.computations:
        local_operands, control, root = _resolve(comp)
        order = post_order(comp, local_operands, control)
        offset = len(ordered)
        node_of = {local: offset + k for k, local in enumerate(order)}
        for local in order:
            ordered.append(comp.instructions[local])
            operands.append([node_of[o] for o in local_operands[local]])
            is_root.append(local == root)
        roots.append(node_of[root])
        ends.append(len(ordered))
    callee_roots = [
        [
            roots[_callee(comp_ids, inst, name)]
            for name in attr.called_computations(inst)
        ]
        for inst in ordered
    ]
    names = [comp.name for comp in module.computations]
    return NodeTable(ordered, is_root, operands, callee_roots, names, ends)


def _computation_ids(module: HloModule) -> dict[str, int]:
    ids: dict[str, int] = {}
    for k, comp in enumerate(module.computations):
        if comp.name in ids:
            raise HloParseError.expected(
                comp.line, "a unique computation name", f"a second {comp.name!r}"
            )
        ids[comp.name] = k
    return ids


def _callee(comp_ids: dict[str, int], inst: HloInstruction, name: str) -> int:
    if name not in comp_ids:
        raise HloParseError.expected(
            inst.line, "the name of a computation in the module", repr(name)
        )
    return comp_ids[name]


def _resolve(comp: HloComputation) -> tuple[list[list[int]], list[list[int]], int]:
    """Operand and control-predecessor indices within the computation, and its root."""
    index: dict[str, int] = {}
    for k, inst in enumerate(comp.instructions):
        if inst.name in index:
            raise HloParseError.expected(
                inst.line, "a unique instruction name", f"a second {inst.name!r}"
            )
        index[inst.name] = k

    def lookup(inst: HloInstruction, names: list[str]) -> list[int]:
        for name in names:
            if name not in index:
                raise HloParseError.expected(
                    inst.line, f"an instruction of computation {comp.name}", repr(name)
                )
        return [index[name] for name in names]

    operands = [lookup(inst, inst.operands) for inst in comp.instructions]
    control = [
        lookup(inst, attr.name_list(inst, "control-predecessors"))
        for inst in comp.instructions
    ]
    return operands, control, _root(comp)


def _root(comp: HloComputation) -> int:
    roots = [k for k, inst in enumerate(comp.instructions) if inst.is_root]
    if len(roots) > 1:
        line = comp.instructions[roots[1]].line
        raise HloParseError.expected(line, f"one ROOT in {comp.name}", "a second ROOT")
    # XLA's parser takes the last instruction when none is marked ROOT.
    return roots[0] if roots else len(comp.instructions) - 1


def post_order(
    comp: HloComputation, operands: list[list[int]], control: list[list[int]]
) -> list[int]:
    """XLA's MakeInstructionPostOrder on the text graph.

    Depth-first from each instruction without users, in printed order; a node is
    emitted after its operands, taken first to last. Iterative (chains in real
    programs are thousands long) and mirrors XLA's stack discipline, including
    control predecessors being pushed after (so visited before) the operands.
    """
    n = len(operands)
    has_user = [False] * n
    for ops in operands:
        for o in ops:
            has_user[o] = True
    state = bytearray(n)  # 0 unseen, 1 on the DFS path, 2 emitted
    order: list[int] = []
    for start in range(n):
        if not has_user[start]:
            _visit(comp, start, operands, control, state, order)
    # Nodes left unseen all have users, which only a cycle allows: walking from
    # them finds it and reports it.
    for start in range(n):
        if not state[start]:
            _visit(comp, start, operands, control, state, order)
    return order


def _visit(
    comp: HloComputation,
    start: int,
    operands: list[list[int]],
    control: list[list[int]],
    state: bytearray,
    order: list[int],
) -> None:
    stack = [start]
    while stack:
        node = stack[-1]
        if state[node]:
            stack.pop()
            if state[node] == 1:
                state[node] = 2
                order.append(node)
            continue
        state[node] = 1
        children = [*reversed(operands[node]), *control[node]]
        for child in children:
            if state[child] == 1:
                _cycle(comp, child)
        stack.extend(children)


def _cycle(comp: HloComputation, node: int) -> NoReturn:
    inst = comp.instructions[node]
    raise HloParseError.expected(
        inst.line, "an acyclic computation", f"a cycle through {inst.name!r}"
    )
