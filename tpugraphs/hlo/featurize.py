"""HLO text -> TpuGraphs arrays: ``featurize_hlo`` and the HloGraph it returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from xla_costmodel.tpugraphs.arrays import F32, I64, U8, Graph, make_graph
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.hlo.features import node_features
from xla_costmodel.tpugraphs.hlo.order import NodeTable, node_table
from xla_costmodel.tpugraphs.hlo.parser import parse_hlo
from xla_costmodel.tpugraphs.spec import NODE_FEAT_DIM, OPCODE_IDS

# The layout collection's configurable ops (what its node_config_ids select).
DEFAULT_CONFIGURABLE_OPCODES = frozenset({"convolution", "dot", "reshape"})
# A computation whose name holds one of these closes a node_splits segment.
_SPLIT_MARKERS = ("cluster", "while", "cond")
# Async wrappers printed as sugar ("custom-call-start"); FORMAT.md maps them here.
_ASYNC_SUFFIX_IDS = {
    "-start": OPCODE_IDS["async-start"],
    "-update": OPCODE_IDS["async-update"],
    "-done": OPCODE_IDS["async-done"],
}
# Layout configs set the output, the first input and, for these, the kernel.
_KERNEL_OPCODES = frozenset({"convolution", "dot"})

Configurable = Literal["default"] | Sequence[str] | None


@dataclass(frozen=True, eq=False)  # arrays have no single truth value to compare
class HloGraph:
    """The TpuGraphs arrays of one HLO module, plus names to address its nodes."""

    node_feat: F32  # [N,140]
    node_opcode: U8  # [N]
    edge_index: I64  # [E,2], row [u,v]: u consumes the output of v
    node_splits: I64  # [S]
    node_names: list[str]  # instruction name of each node, without '%'
    node_config_ids: I64 | None  # [NC] increasing, or None (tile graph)
    # Per configurable node: ranks of its output, first input and (conv/dot) kernel,
    # so layout configs can be checked against real tensor ranks.
    config_tensor_ranks: list[tuple[int, ...]] | None = None

    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    def to_graph(self) -> Graph:
        """Validated ``Graph``; raises GraphFormatError (e.g. no configurable node)."""
        return make_graph(
            self.node_feat,
            self.node_opcode,
            self.edge_index,
            self.node_config_ids,
            self.node_splits,
        )


def featurize_hlo(text: str, configurable: Configurable = "default") -> HloGraph:
    """Featurize HLO text exactly as the TpuGraphs dataset did.

    ``configurable``: "default" selects every convolution, dot and reshape (the layout
    collection's rule); a sequence names the instructions explicitly; None makes a
    tile graph without ``node_config_ids``. Raises HloParseError (a GraphFormatError)
    on malformed text and GraphFormatError on an unknown configurable name.
    """
    table = node_table(parse_hlo(text))
    node_feat = np.array(
        [
            node_features(inst, root)
            for inst, root in zip(table.instructions, table.is_root, strict=True)
        ],
        dtype=np.float32,
    ).reshape(-1, NODE_FEAT_DIM)
    names = [inst.name for inst in table.instructions]
    config_ids = _configurable_ids(table, names, configurable)
    ranks = (
        None
        if config_ids is None
        else [_tensor_ranks(table, int(i)) for i in config_ids]
    )
    return HloGraph(
        node_feat=node_feat,
        node_opcode=np.array(
            [opcode_id(i.opcode) for i in table.instructions], np.uint8
        ),
        edge_index=_edges(table),
        node_splits=_splits(table),
        node_names=names,
        node_config_ids=config_ids,
        config_tensor_ranks=ranks,
    )


def opcode_id(opcode: str) -> int:
    """The TpuGraphs opcode id; 0 for opcodes the 2023 table does not know."""
    found = OPCODE_IDS.get(opcode)
    if found is not None:
        return found
    for suffix, async_id in _ASYNC_SUFFIX_IDS.items():
        if opcode.endswith(suffix):
            return async_id
    return 0


def _edges(table: NodeTable) -> I64:
    n = len(table.instructions)
    codes = {
        u * n + v
        for u, (ops, roots) in enumerate(
            zip(table.operands, table.callee_roots, strict=True)
        )
        for v in (*ops, *roots)
        if u != v
    }
    # One code per (u, v) pair: sorting the codes sorts the rows lexicographically.
    flat = np.array(sorted(codes), dtype=np.int64)
    return np.stack([flat // max(n, 1), flat % max(n, 1)], axis=1).reshape(-1, 2)


def _splits(table: NodeTable) -> I64:
    splits = [0]
    for name, end in zip(table.computation_names, table.computation_ends, strict=True):
        if any(marker in name for marker in _SPLIT_MARKERS):
            splits.append(end)
    splits.append(len(table.instructions))
    return np.array(splits, dtype=np.int64)


def _configurable_ids(
    table: NodeTable, names: list[str], configurable: Configurable
) -> I64 | None:
    if configurable is None:
        return None
    if isinstance(configurable, str):
        if configurable != "default":
            raise GraphFormatError(
                "configurable",
                f"expected 'default', a list of names or None, got {configurable!r}",
            )
        ids = [
            k
            for k, inst in enumerate(table.instructions)
            if inst.opcode in DEFAULT_CONFIGURABLE_OPCODES
        ]
        return np.array(ids, dtype=np.int64)
    node_of: dict[str, int] = {}
    for k, name in enumerate(names):
        # -1 marks a name several instructions share, which cannot select one.
        node_of[name] = -1 if name in node_of else k
    for j, name in enumerate(configurable):
        node = node_of.get(name)
        if node is None or node < 0:
            problem = "no instruction" if node is None else "several instructions"
            raise GraphFormatError(f"configurable[{j}]", f"{problem} named {name!r}")
    return np.array(sorted({node_of[name] for name in configurable}), dtype=np.int64)


def _tensor_ranks(table: NodeTable, node: int) -> tuple[int, ...]:
    inst = table.instructions[node]
    wanted = 2 if inst.opcode in _KERNEL_OPCODES else 1
    inputs = table.operands[node][:wanted]
    return (inst.shape.rank, *(table.instructions[v].shape.rank for v in inputs))
