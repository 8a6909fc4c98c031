"""A graph on the wire: the TpuGraphs arrays (and config batches) with their JSON
shapes for OpenAPI, the one-of rules the decoders apply, ``PUT /v1/graphs``'s answer.

The arrays are declared here but validated by ``xla_costmodel.service.core.inputs``
(``xla_costmodel.tpugraphs.arrays``), the same code that checks binary npz bodies.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict, JsonValue

from xla_costmodel.service.schemas.common import (
    FLOAT32,
    HEX64,
    StrictWire,
    Wire,
    doc,
)
from xla_costmodel.tpugraphs.collections import COLLECTIONS, CollectionSpec


def _rows(width: int, kind: str = "number") -> dict[str, Any]:
    row = {
        "type": "array",
        "items": FLOAT32 if kind == "number" else {"type": kind},
        "minItems": width,
        "maxItems": width,
    }
    return {"type": "array", "items": row}


def _configs(per_node: bool, width: int) -> dict[str, Any]:
    batch = {"type": "array", "items": _rows(width)} if per_node else _rows(width)
    return {**batch, "minItems": 1}  # an empty batch is a 422


def widths(c: CollectionSpec) -> tuple[int, ...]:
    """The row widths a collection's configs are taken in: today's, then each
    older spec's (upgraded on arrival: ``xla_cpu/1``'s 17 -> ``xla_cpu/2``'s 20)."""
    return tuple(shape[-1] for shape in c.config_shapes())


def shapes_doc(c: CollectionSpec, batch: str = "C,") -> str:
    """``[C,20] (or [C,17], xla_cpu/1)``: the shapes a collection's configs take,
    as a batch (``batch="C,"``) or as one row (``batch=""``)."""
    nodes = "NC," if c.per_node else ""
    older = "".join(f" (or [{batch}{nodes}{o.width}], {o.name})" for o in c.older)
    return f"[{batch}{nodes}{c.width}]{older}"


_OPCODES = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 120}}
_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}}
# Every collection's config batch (one schema per distinct shape), older specs' too.
_CONFIG_SHAPES = {(c.per_node, w) for c in COLLECTIONS.values() for w in widths(c)}
_CONFIGS = {"oneOf": [_configs(*shape) for shape in sorted(_CONFIG_SHAPES)]}
_PER_NODE = ", ".join(c.name for c in COLLECTIONS.values() if c.per_node)

NodeFeat = Annotated[
    list[Any], doc(_rows(140), "float32 [N,140]: one row per instruction")
]
NodeOpcode = Annotated[list[Any], doc(_OPCODES, "opcode ids [N], 0..120")]
EdgeIndex = Annotated[list[Any], doc(_rows(2, "integer"), "[E,2]; [u,v]: u consumes v")]
NodeConfigIds = Annotated[
    list[Any], doc(_IDS, f"{_PER_NODE} only: configurable nodes [NC]")
]
Configs = Annotated[
    list[Any],
    doc(
        _CONFIGS,
        "; ".join(
            f"{c.name}: {c.config_key} {shapes_doc(c)}" for c in COLLECTIONS.values()
        ),
    ),
]

_DIMS = {
    "type": ["array", "null"],
    "items": {"type": "integer", "minimum": 0},
    "maxItems": 6,
    "description": "minor-to-major dims; null: the compiler chooses",
}
_ROW_RAW = {c.name: c.raw.schema for c in COLLECTIONS.values() if c.raw is not None}
_LAYOUT_RAW = {
    "title": "NodeLayouts",
    "type": "object",
    "description": "instruction name (graphs sent as HLO) or node id -> its layout; "
    "nodes left out: the compiler chooses",
    "additionalProperties": {
        "type": "object",
        "properties": {k: _DIMS for k in ("output", "input", "kernel")},
        "additionalProperties": False,
    },
}
RawConfigsDoc = Annotated[
    list[Any],
    doc(
        {
            "type": "array",
            "items": {"oneOf": [*_ROW_RAW.values(), _LAYOUT_RAW]},
            "minItems": 1,
        },
        "configs in raw form, as the model's collection takes them: "
        + ", ".join(f"{schema['title']} ({name})" for name, schema in _ROW_RAW.items())
        + f", or layouts by node ({_PER_NODE})",
    ),
]
ConfigurableNames = list[Annotated[str, Field(min_length=1)]]
EXAMPLE_HLO = (
    "HloModule example\n\nENTRY main {\n"
    "  x = f32[8,16]{1,0} parameter(0)\n"
    "  w = f32[16,4]{1,0} parameter(1)\n"
    "  ROOT dot.1 = f32[8,4]{1,0} dot(x, w), lhs_contracting_dims={1}, "
    "rhs_contracting_dims={0}\n}\n"
)

_EXAMPLE_GRAPH: JsonDict = {
    "node_feat": [[0.0] * 140, [0.0] * 140],
    "node_opcode": [63, 2],
    "edge_index": [[1, 0]],
}


def exactly_one(
    kinds: dict[str, str], *, nulls: dict[str, str] | None = None
) -> JsonDict:
    """``oneOf``: exactly one of ``kinds``' keys is set (not null), as the decoders
    demand, so that a body this schema accepts is not refused for it. ``nulls`` maps
    a key to one more that must stay unset when that key is the chosen one."""
    branches: list[JsonValue] = []
    for key, kind in kinds.items():
        props: JsonDict = {k: {"type": "null"} for k in kinds if k != key}
        if nulls and key in nulls:
            props[nulls[key]] = {"type": "null"}
        props[key] = {"type": kind}
        branches.append({"required": [key], "properties": props})
    return {"oneOf": branches}


# ``configurable`` names instructions of an ``hlo`` module: with arrays it is refused.
# Documents the rule ``xla_costmodel.service.core.inputs.one_graph`` checks.
ONE_GRAPH = exactly_one(
    {"graph_id": "string", "graph": "object", "hlo": "string"},
    nulls={"graph_id": "configurable", "graph": "configurable"},
)


class GraphIn(StrictWire):
    """A graph as JSON: the TpuGraphs arrays (``node_config_ids`` for a model whose
    collection configures nodes, layout, only)."""

    model_config = ConfigDict(json_schema_extra={"examples": [_EXAMPLE_GRAPH]})
    node_feat: NodeFeat
    node_opcode: NodeOpcode
    edge_index: EdgeIndex
    node_config_ids: NodeConfigIds | None = None


class GraphOut(Wire):
    graph_id: str = Field(pattern=HEX64, description="sha256 of the canonical arrays")
    nodes: int
    edges: int
    configurable_nodes: int
    cached: bool = Field(description="the embedding was already cached")
