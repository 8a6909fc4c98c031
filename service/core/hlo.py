"""HLO text in a request -> a validated graph, its graph_id and its record.

The text is featurized by ``xla_costmodel.tpugraphs.hlo`` (the same code as ``costmodel featurize``
and the client), so the graph_id equals that of the same module sent as arrays and
shares its cached embedding. Which nodes are configurable follows the model's
collection: none for one configured by one row (tile, xla_cpu); for a per-node one
(layout) every convolution, dot and reshape (the TpuGraphs rule) unless the request
names them. CPU-bound: call it in a thread (the ranker's bounded pool).

Bounded before any parsing: ``check_hlo_size`` (on the loop, O(1)) refuses text over
``max_hlo_bytes`` characters, and ``featurize_graph`` first counts the instruction
lines with one regular-expression pass (``max_hlo_instructions``), so a huge module
costs a scan, never a parse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from xla_costmodel.service.core.errors import InvalidRequest, PayloadTooLarge
from xla_costmodel.service.core.graph_meta import GraphMeta
from xla_costmodel.service.core.inputs import Limits, RawGraph, build_graph
from xla_costmodel.tpugraphs.arrays import Graph
from xla_costmodel.tpugraphs.collections import get
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.hlo import HloParseError, featurize_hlo
from xla_costmodel.tpugraphs.hlo.featurize import Configurable

# An instruction line as the parser reads one (``tpugraphs/hlo/parser.py``).
_INSTRUCTION = re.compile(r"^[ \t]*(?:ROOT[ \t]+)?%?[A-Za-z0-9_.\-]+[ \t]*=", re.M)


@dataclass(frozen=True)
class HloText:
    """A module as text; ``field`` is where parse errors point (``body`` or ``hlo``)."""

    text: str
    configurable: tuple[str, ...] | None = None  # None: the collection's rule
    field: str = "body"


def featurize_graph(
    src: HloText, collection: str, limits: Limits
) -> tuple[Graph, str, GraphMeta | None]:
    """Featurize and validate; ``InvalidRequest`` names the line or the field."""
    check_hlo_size(src, limits)
    count = sum(1 for _ in _INSTRUCTION.finditer(src.text))
    if count > limits.max_hlo_instructions:
        raise InvalidRequest(
            f"the module has {count} instructions, more than "
            f"{limits.max_hlo_instructions} (COSTMODEL_MAX_HLO_INSTRUCTIONS)",
            src.field,
        )
    rule = _rule(src, collection)
    try:
        hlo = featurize_hlo(src.text, rule)
    except HloParseError as exc:
        raise InvalidRequest(f"not valid HLO text: {exc}", src.field) from None
    except GraphFormatError as exc:  # an unknown configurable name
        raise InvalidRequest(exc.problem, exc.key) from None
    if hlo.num_nodes > limits.max_nodes:
        raise InvalidRequest(
            f"the module has {hlo.num_nodes} instructions, more than {limits.max_nodes}",
            src.field,
        )
    ids = hlo.node_config_ids
    if ids is not None and len(ids) == 0:
        raise InvalidRequest(
            "the module has no convolution, dot or reshape to configure; "
            "name the configurable instructions",
            "configurable",
        )
    arrays = {
        "node_feat": hlo.node_feat,
        "node_opcode": hlo.node_opcode,
        "edge_index": hlo.edge_index,
    }
    if ids is not None:
        arrays["node_config_ids"] = ids
    graph, gid = build_graph(RawGraph(arrays, "", len(src.text)), collection, limits)
    if ids is None:
        return graph, gid, None
    names = tuple(hlo.node_names[int(i)] for i in ids)
    ranks = tuple(tuple(r) for r in hlo.config_tensor_ranks or ())
    meta = GraphMeta(tuple(int(i) for i in ids), names, ranks or None)
    return graph, gid, meta


def check_hlo_size(src: HloText, limits: Limits) -> None:
    """``PayloadTooLarge`` for text over ``max_hlo_bytes`` characters (bytes, as HLO
    is ASCII); cheap enough for the event loop."""
    if len(src.text) > limits.max_hlo_bytes:
        raise PayloadTooLarge(
            f"HLO text of {len(src.text)} characters, more than "
            f"{limits.max_hlo_bytes} (COSTMODEL_MAX_HLO_BYTES)",
            src.field,
        )


def _rule(src: HloText, collection: str) -> Configurable:
    if not get(collection).per_node:
        if src.configurable is not None:
            raise InvalidRequest(
                f"a {collection} model has no configurable instructions", "configurable"
            )
        return None
    if src.configurable is None:
        return "default"
    if not src.configurable:
        raise InvalidRequest("name at least one instruction", "configurable")
    return list(src.configurable)
