"""Wire schemas (v1): strict request bodies, responses, and the one error shape.

Graph and config arrays are declared with their JSON shapes for OpenAPI but are
validated by ``xla_costmodel.service.core.inputs`` (``xla_costmodel.tpugraphs.arrays``), the same code that checks
binary npz bodies, so JSON and npz clients get identical errors and field names.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    WithJsonSchema,
)
from pydantic.config import JsonDict, JsonValue

from xla_costmodel.tpugraphs.collections import COLLECTIONS
from xla_costmodel.tpugraphs.spec import Collection

HEX64 = r"^[0-9a-f]{64}$"
RANKING_ID = r"^[0-9a-f]{32}$"
VERSION = r"^[0-9]+$"
TARGET = (
    r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$"  # xla_costmodel.manifest.TARGET_PATTERN
)
# A compiler build as a tuner names it ("jax 0.4.31 / xla 1b2c3d"): printable, no
# control characters (it is logged and stored).
COMPILER = r"^[^\x00-\x1f\x7f]{1,128}$"
_COMPILER_DOC = (
    "the compiler build the runtimes were measured under (free text, e.g. "
    "jax/jaxlib versions and the XLA commit); null or absent: unknown"
)
_RANK_COMPILER_DOC = (
    "the compiler build the configs will run under: measurements of another count "
    "less and never dominate; null or absent: that of the target's newest rows"
)
_TARGET_DOC = (
    "the hardware the runtimes are (to be) measured on, e.g. tpu-v3; default: the "
    "model's target. Measurements of different targets are never mixed."
)
_ADAPT_DOC = (
    "combine the model with a fit on this graph's measurements (on this target) "
    "once there are enough; false: the model's prior alone"
)
NPZ_MEDIA_TYPE = "application/x-npz"
HLO_MEDIA_TYPE = "text/x-hlo"


def _integral(value: Any) -> Any:
    """JSON Schema counts 2.0 as an integer (its value is one); strict pydantic
    would refuse it, so an integral float is taken as that integer."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_integral)]
# The bound before the validator, or OpenAPI would show pydantic's "ge" keyword.
TopK = Annotated[int, Field(ge=1), BeforeValidator(_integral)]
INT64_MAX = 2**63 - 1


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StrictWire(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _doc(schema: dict[str, Any], description: str) -> WithJsonSchema:
    return WithJsonSchema({**schema, "description": description})


# Numbers become float32 arrays, which refuse what overflows to infinity (422).
FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT32 = {"type": "number", "minimum": -FLOAT32_MAX, "maximum": FLOAT32_MAX}


def _rows(width: int, kind: str = "number") -> dict[str, Any]:
    row = {
        "type": "array",
        "items": _FLOAT32 if kind == "number" else {"type": kind},
        "minItems": width,
        "maxItems": width,
    }
    return {"type": "array", "items": row}


def _configs(per_node: bool, width: int) -> dict[str, Any]:
    batch = {"type": "array", "items": _rows(width)} if per_node else _rows(width)
    return {**batch, "minItems": 1}  # an empty batch is a 422


_OPCODES = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 120}}
_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}}
# Every collection's config batch (one schema per distinct shape).
_CONFIG_SHAPES = {(c.per_node, c.width) for c in COLLECTIONS.values()}
_CONFIGS = {"oneOf": [_configs(*shape) for shape in sorted(_CONFIG_SHAPES)]}
_PER_NODE = ", ".join(c.name for c in COLLECTIONS.values() if c.per_node)

NodeFeat = Annotated[
    list[Any], _doc(_rows(140), "float32 [N,140]: one row per instruction")
]
NodeOpcode = Annotated[list[Any], _doc(_OPCODES, "opcode ids [N], 0..120")]
EdgeIndex = Annotated[
    list[Any], _doc(_rows(2, "integer"), "[E,2]; [u,v]: u consumes v")
]
NodeConfigIds = Annotated[
    list[Any], _doc(_IDS, f"{_PER_NODE} only: configurable nodes [NC]")
]
Configs = Annotated[
    list[Any],
    _doc(
        _CONFIGS,
        "; ".join(
            f"{c.name}: {c.config_key} {c.shape_doc()}" for c in COLLECTIONS.values()
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
    _doc(
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
_EXAMPLE_HLO = (
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


def _exactly_one(
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
_ONE_GRAPH = _exactly_one(
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


class RankIn(StrictWire):
    """Rank configs for one graph: exactly one of ``graph_id``, ``graph`` and ``hlo``,
    and exactly one of ``configs`` (feature arrays) and ``raw_configs``."""

    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                _ONE_GRAPH,
                _exactly_one({"configs": "array", "raw_configs": "array"}),
            ],
            "examples": [
                {
                    "model": "tile",
                    "graph_id": "0" * 64,
                    "configs": [[0.0] * 24],
                    "top_k": 1,
                },
                {
                    "model": "tile",
                    "graph_id": "0" * 64,
                    "raw_configs": [
                        {
                            "kernel_bounds": [1, 128],
                            "output_bounds": [8, 128],
                            "input_bounds": [8, 128],
                        }
                    ],
                },
                {
                    "model": "layout",
                    "hlo": _EXAMPLE_HLO,
                    "raw_configs": [
                        {
                            "dot.1": {
                                "output": [0, 1],
                                "input": [1, 0],
                                "kernel": [0, 1],
                            }
                        },
                        {"dot.1": {"output": [1, 0], "input": None, "kernel": None}},
                        {},
                    ],
                },
            ],
        }
    )
    model: str = Field(min_length=1, max_length=64)
    model_version: str | None = Field(None, pattern=VERSION)
    graph_id: str | None = Field(None, pattern=HEX64)
    graph: GraphIn | None = None
    hlo: str | None = Field(None, min_length=1, description="the module as HLO text")
    configurable: ConfigurableNames | None = Field(
        None,
        description="with hlo, for a layout model: the configurable instructions "
        "(default: every convolution, dot and reshape)",
    )
    configs: Configs | None = None
    raw_configs: RawConfigsDoc | None = None
    top_k: TopK | None = Field(None, description="default: all configs")
    target: str | None = Field(None, pattern=TARGET, description=_TARGET_DOC)
    compiler: str | None = Field(None, pattern=COMPILER, description=_RANK_COMPILER_DOC)
    adapt: bool = Field(True, description=_ADAPT_DOC)
    portfolio: bool = Field(
        False,
        description="also answer `portfolio`: every index in exploration order "
        "(configs that won on other programs of the target first, then spread-out "
        "ones); a tuner's first round measures its head",
    )


class GraphOut(Wire):
    graph_id: str = Field(pattern=HEX64, description="sha256 of the canonical arrays")
    nodes: int
    edges: int
    configurable_nodes: int
    cached: bool = Field(description="the embedding was already cached")


class RankOut(Wire):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "tile",
                    "model_version": "1",
                    "graph_id": "0" * 64,
                    "cache": "memory",
                    "ranking": [1, 0, 2],
                    "scores": [0.4, 0.1, 0.9],
                    "top_k": [1],
                    "adapted": 0,
                    "ranking_id": "0" * 32,
                }
            ]
        }
    )
    model: str
    model_version: str
    graph_id: str
    cache: Literal["memory", "redis", "miss"]
    adapted: int = Field(
        ge=0,
        description="distinct measured configs of this graph that shaped the scores "
        "(per-graph adaptation); 0: the model's prior alone",
    )
    ranking_id: str = Field(
        pattern=RANKING_ID,
        description="names this answer: feedback by config_indices sends it, so its "
        "indices mean this answer's configs",
    )
    ranking: list[int] = Field(
        description="all config indices, best first; ties by index"
    )
    scores: list[float] = Field(description="scores[i] is config i's; lower = faster")
    top_k: list[int] = Field(description="the first top_k entries of ranking")
    target_programs: int = Field(
        0,
        ge=0,
        description="programs in the target's knowledge (learned across every graph "
        "measured on the target, and at reduced trust on other targets)",
    )
    target_measurements: int = Field(0, ge=0, description="their measurements")
    knowledge_weight: float = Field(
        0.0, ge=0, le=1, description="the target knowledge's share of the prior"
    )
    prior_weight: float = Field(
        1.0,
        ge=0,
        le=1,
        description="the model's weight: 1, or less when it was not trained on "
        "runtimes of this target",
    )
    portfolio: list[int] | None = Field(
        None, description="with portfolio=true: every index, exploration order"
    )


_INDICES = {"type": "array", "items": {"type": "integer", "minimum": 0}}
_RUNTIMES = {
    "type": "array",
    "items": {"type": "integer", "minimum": 1, "maximum": INT64_MAX},
    "minItems": 1,
}
ConfigIndices = Annotated[
    list[JsonInt], _doc(_INDICES, "indices into the configs of the latest rank request")
]
RuntimesNs = Annotated[
    list[JsonInt], _doc(_RUNTIMES, "measured runtime per config, ns")
]


class FeedbackIn(StrictWire):
    """Measured runtimes: exactly one of ``configs`` and ``config_indices``, and
    exactly one of ``graph_id``, ``graph`` and ``hlo`` (inline for a graph the service
    has not seen, as for ranking).

    ``config_indices`` name configs of the rank answer whose ``ranking_id`` comes
    with them (required with them: 422 field ``ranking_id``), remembered best-effort
    for a day, in Redis when the service has one, else per process (else 409
    ranking_not_found: send ``configs``).
    """

    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                _ONE_GRAPH,
                _exactly_one({"configs": "array", "config_indices": "array"}),
            ],
            "examples": [
                {
                    "model": "tile",
                    "graph_id": "0" * 64,
                    "configs": [[0.0] * 24, [1.0] * 24],
                    "runtimes_ns": [1200, 900],
                },
                {
                    "model": "layout",
                    "model_version": "1",
                    "graph_id": "0" * 64,
                    "config_indices": [3, 0],
                    "ranking_id": "0" * 32,
                    "runtimes_ns": [52000, 61000],
                },
            ],
        }
    )
    model: str = Field(min_length=1, max_length=64)
    model_version: str | None = Field(None, pattern=VERSION)
    graph_id: str | None = Field(None, pattern=HEX64)
    graph: GraphIn | None = None
    hlo: str | None = Field(None, min_length=1, description="the module as HLO text")
    configurable: ConfigurableNames | None = Field(
        None, description="with hlo, for a layout model: the configurable instructions"
    )
    configs: Configs | None = None
    config_indices: ConfigIndices | None = None
    ranking_id: str | None = Field(
        None, pattern=RANKING_ID, description="with config_indices: the rank answer's"
    )
    runtimes_ns: RuntimesNs
    target: str | None = Field(None, pattern=TARGET, description=_TARGET_DOC)
    compiler: str | None = Field(None, pattern=COMPILER, description=_COMPILER_DOC)


class FeedbackOut(Wire):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "stored": 2,
                    "model": "tile",
                    "model_version": "1",
                    "graph_id": "0" * 64,
                    "target": "tpu-v3",
                    "kendall_tau": 1.0,
                    "top1_slowdown": 0.0,
                }
            ]
        }
    )
    stored: int = Field(
        description="measurements committed to the database (a resend with the same "
        "Idempotency-Key gets the first answer again, and stores nothing)"
    )
    model: str
    model_version: str = Field(description="the version that scored the configs")
    graph_id: str
    target: str = Field(description="the hardware the runtimes were stored under")
    kendall_tau: float | None = Field(
        description="tau-b of this request's scores vs runtimes (1 = same order); "
        "null with fewer than 2 distinct runtimes"
    )
    top1_slowdown: float | None = Field(
        description="runtime of the best-scored config / the fastest one - 1 "
        "(0 = the model picked a fastest); null with fewer than 2 distinct runtimes"
    )


_DECISION_ROWS = {
    "oneOf": [
        {"type": "array", "items": _FLOAT32, "minItems": 1},
        {
            "type": "array",
            "items": {"type": "array", "items": _FLOAT32, "minItems": 1},
            "minItems": 1,
        },
    ]
}
DecisionConfig = Annotated[
    list[Any],
    _doc(
        _DECISION_ROWS,
        "the kept config as one row of the model's collection ("
        + "; ".join(
            f"{c.name}: [{'NC,' if c.per_node else ''}{c.width}]"
            for c in COLLECTIONS.values()
        )
        + "); the default row when the default was kept",
    ),
]
OptionName = Annotated[str, Field(min_length=1, max_length=200)]
MAX_OPTION_CHARS = 4096


def _option(value: Any) -> str | bool | int | float:
    """A compiler option's value; one validator, not a union, so that a refusal
    names the option (``compiler_options.<name>``), not a union member."""
    if isinstance(value, bool | int) or (
        isinstance(value, float) and np.isfinite(value)
    ):
        return value
    if isinstance(value, str) and len(value) <= MAX_OPTION_CHARS:
        return value
    raise ValueError(
        f"expected a string (at most {MAX_OPTION_CHARS} characters), a finite "
        "number or a boolean"
    )


OptionValue = Annotated[
    Any,
    PlainValidator(_option),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "maxLength": MAX_OPTION_CHARS},
                {"type": "number"},
                {"type": "boolean"},
            ]
        }
    ),
]
Speedup = Annotated[float, Field(gt=0, allow_inf_nan=False)]
_EXAMPLE_DECISION: JsonDict = {
    "model": "xla_cpu",
    "target": "cpu-x86",
    "compiler": "jax 0.4.31",
    "graph_id": "0" * 64,
    "config": [0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0],
    "compiler_options": {"xla_cpu_enable_fast_math": True},
    "speedup": 1.21,
    "speedup_low": 1.12,
    "speedup_high": 1.3,
    "p_value": 0.004,
    "pairs": 20,
    "budget": 64,
    "strategy": "model",
    "kept_default": False,
}


class DecisionIn(StrictWire):
    """What a tuner kept for one program: the config and the compiler options it
    stands for, with the measured speedup over the default and its bounds."""

    model_config = ConfigDict(json_schema_extra={"examples": [_EXAMPLE_DECISION]})
    model: str = Field(min_length=1, max_length=64)
    model_version: str | None = Field(None, pattern=VERSION)
    target: str | None = Field(None, pattern=TARGET, description=_TARGET_DOC)
    compiler: str | None = Field(
        None,
        pattern=COMPILER,
        description="the compiler build the decision was measured under; null: unknown",
    )
    graph_id: str = Field(pattern=HEX64)
    hlo_fingerprint: str | None = Field(
        None,
        pattern=HEX64,
        description="sha256 of the program's lowered StableHLO module without debug "
        "info (clients.xla.reuse.fingerprint): GET /v1/best finds the decision by it",
    )
    config: DecisionConfig
    compiler_options: dict[OptionName, OptionValue] = Field(
        max_length=256,
        description="what the config means to the compiler (flag -> value); {} "
        "for a kept default",
    )
    speedup: Speedup = Field(description="default runtime / kept runtime")
    speedup_low: Speedup = Field(
        description="the lower confidence bound of the speedup (<= speedup): what "
        "GET /v1/best ranks decisions by"
    )
    speedup_high: Speedup | None = Field(None, description="upper bound, >= speedup")
    p_value: float | None = Field(
        None, ge=0, le=1, description="that the kept config is no faster"
    )
    pairs: JsonInt = Field(ge=0, le=2**31 - 1, description="paired measurements")
    budget: JsonInt = Field(ge=0, le=2**31 - 1, description="measurements allowed")
    strategy: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,15}$",
        description="how the config was found: model, random, reuse (taken from "
        "GET /v1/best), ...",
    )
    kept_default: bool = Field(
        description="tuning kept the compiler's default (config: the default row)"
    )


class DecisionOut(Wire):
    stored: bool = Field(
        description="false: a resend with the same Idempotency-Key, answered with "
        "the first answer and stored once"
    )
    decision_id: int
    graph_id: str
    target: str
    compiler: str | None
    model: str
    model_version: str


class BestOut(Wire):
    """The decision to reuse for a program (``service/core/best.py``)."""

    graph_id: str
    target: str
    config: list[Any] = Field(description="the kept row ([width] or [NC,width])")
    compiler_options: dict[str, str | bool | int | float] = Field(
        description="{} where the tuning kept the default"
    )
    speedup: float
    speedup_low: float
    p_value: float | None
    writers: int = Field(
        ge=1,
        description="distinct writers that decided this config under this compiler "
        "(anonymous decisions count as one)",
    )
    decided_at: datetime = Field(description="when the answered decision was stored")
    compiler: str | None = Field(description="the decision's compiler")
    stale: bool = Field(
        description="decided under another compiler than the one asked (none was "
        "decided under it); false when none was asked"
    )
    model: str = Field(description="the model of the answered decision")
    kept_default: bool
    pairs: int
    strategy: str


class TensorSpecOut(Wire):
    name: str
    dtype: str
    shape: list[int | str]


class ModelOut(Wire):
    name: str
    collection: Collection
    version: str = Field(description="the version serving unpinned requests")
    loaded_versions: list[str] = Field(description="versions a request may pin")
    graph_inputs: list[TensorSpecOut]
    config_input: TensorSpecOut
    embedding: list[TensorSpecOut]


class ModelsOut(Wire):
    models: list[ModelOut]


class ReloadOut(Wire):
    model: str
    previous_version: str | None
    version: str
    changed: bool
    loaded_versions: list[str]


class TargetOut(Wire):
    """One model's measurements on one target (``service/core/fleet.py``)."""

    model: str
    collection: str
    target: str
    programs: int = Field(ge=0, description="graphs with measurements")
    tuned: int = Field(
        ge=0, description="graphs whose default config was measured: the gain's"
    )
    measurements: int = Field(ge=0, description="measured runtimes stored")
    decisions: int = Field(0, ge=0, description="tuning decisions stored")
    gain: float | None = Field(
        description="geometric mean over the tuned graphs of the default config's "
        "runtime / the best measured (a speedup, >= 1); null: no tuned graph"
    )


class TargetsOut(Wire):
    as_of: datetime | None = Field(
        description="when these figures were read from the database (every "
        "COSTMODEL_FLEET_REFRESH_S); null: not yet"
    )
    targets: list[TargetOut] = Field(description="every model and target, sorted")


class LiveOut(Wire):
    status: Literal["ok"] = "ok"


class ModelStatusOut(Wire):
    version: str | None
    loaded_versions: list[str]
    error: str | None


class ReadyOut(Wire):
    ready: bool
    models: dict[str, ModelStatusOut]


class V2LiveOut(Wire):
    live: bool


class V2ReadyOut(Wire):
    ready: bool


class ErrorDetail(Wire):
    code: str = Field(examples=["invalid_request"])
    message: str
    field: str | None = Field(
        None, description="the offending input: a body key path or a query parameter"
    )


class ErrorOut(Wire):
    """Every error response, whatever the status."""

    error: ErrorDetail


_ERRORS = {
    400: "malformed_body: the JSON or npz cannot be parsed",
    401: "unauthorized: no bearer token, or (feedback, decisions) an unknown or "
    "revoked one",
    403: "forbidden: wrong admin token, the admin API is disabled, or (feedback, "
    "decisions; field target) a writer token not good for the target",
    408: "request_timeout: the body did not arrive within COSTMODEL_BODY_TIMEOUT_S",
    404: "model_not_found, graph_not_found (upload the graph, then retry), or "
    "no_decision (GET /v1/best: no decision qualifies)",
    409: "model_version_not_loaded, reload_failed (the old version keeps serving), or "
    "ranking_not_found (feedback by config_indices: send configs instead), or "
    "graph_metadata_not_found (raw layout configs: re-send the graph)",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request: the field names the offending input",
    429: "quota_exceeded: the writer stored its quota of measurements; see Retry-After",
    503: "not_ready, overloaded, feedback_unavailable or decisions_unavailable "
    "(nothing stored); see Retry-After",
}


def _header(description: str, kind: str = "string") -> dict[str, Any]:
    return {"description": description, "schema": {"type": kind}}


_ERROR_HEADERS = {
    401: {"WWW-Authenticate": _header("Bearer")},
    429: {"Retry-After": _header("seconds to wait before retrying", "integer")},
    503: {"Retry-After": _header("seconds to wait before retrying", "integer")},
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries so OpenAPI shows the error model (and the headers that
    come with it) for each status."""
    return {
        s: {"model": ErrorOut, "description": _ERRORS[s]}
        | ({"headers": _ERROR_HEADERS[s]} if s in _ERROR_HEADERS else {})
        for s in statuses
    }


RANK_NPZ_HEADERS = {
    name: _header(f"npz answers only: {what}")
    for name, what in (
        ("X-Model", "model"),
        ("X-Model-Version", "model_version"),
        ("X-Cache", "cache"),
        ("X-Graph-ID", "graph_id"),
        ("X-Adapted", "adapted"),
        ("X-Ranking-ID", "ranking_id"),
        ("X-Target-Programs", "target_programs"),
        ("X-Target-Measurements", "target_measurements"),
        ("X-Knowledge-Weight", "knowledge_weight"),
        ("X-Prior-Weight", "prior_weight"),
    )
}


def binary_body(
    json_model: type[BaseModel], *, required: bool = True, hlo: bool = False
) -> dict[str, Any]:
    """``openapi_extra`` for a body that is JSON or an npz archive (or HLO text)."""
    ref = {"$ref": f"#/components/schemas/{json_model.__name__}"}
    # An empty body is refused (400 malformed_body) whatever its media type.
    binary = {"type": "string", "format": "binary", "minLength": 1}
    content: dict[str, Any] = {
        "application/json": {"schema": ref},
        NPZ_MEDIA_TYPE: {"schema": binary},
    }
    if hlo:
        text = {
            "type": "string",
            "minLength": 1,
            "description": "an HLO module as XLA prints it",
        }
        content[HLO_MEDIA_TYPE] = {"schema": text, "example": _EXAMPLE_HLO}
    return {"requestBody": {"required": required, "content": content}}


def json_only_body(json_model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` for a required JSON body that the route reads itself."""
    ref = {"$ref": f"#/components/schemas/{json_model.__name__}"}
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ref}},
        }
    }


BODY_MODELS: tuple[type[BaseModel], ...] = (GraphIn, RankIn, FeedbackIn, DecisionIn)


class RankQuery(BaseModel):
    """``POST /v1/rank``'s query parameters: for npz bodies they carry what JSON puts
    in the body (``adapt`` for any body). The route parses them itself
    (``parse_query``): FastAPI's per-parameter dependency solving was 8% of a
    1-config rank's server time, for parameters a JSON body never sends."""

    model_config = ConfigDict(extra="ignore", frozen=True, protected_namespaces=())

    model: str | None = Field(
        None, min_length=1, max_length=64, description="npz bodies"
    )
    graph_id: str | None = Field(None, pattern=HEX64, description="npz bodies")
    top_k: int | None = Field(None, ge=1, description="npz bodies")
    model_version: str | None = Field(None, pattern=VERSION, description="npz bodies")
    target: str | None = Field(None, pattern=TARGET, description="npz bodies")
    compiler: str | None = Field(None, pattern=COMPILER, description="npz bodies")
    adapt: bool | None = Field(
        None, description="false: the model's prior alone (any body)"
    )
    portfolio: bool | None = Field(None, description="npz bodies")


def query_parameters(query: type[BaseModel]) -> list[dict[str, Any]]:
    """OpenAPI ``parameters`` of a query model (optional, in the query)."""
    props = query.model_json_schema()["properties"]
    return [
        {
            "name": name,
            "in": "query",
            "required": False,
            "schema": schema,
            "description": schema.get("description", ""),
        }
        for name, schema in props.items()
    ]
