"""Wire schemas (v1): strict request bodies, responses, and the one error shape.

Graph and config arrays are declared with their JSON shapes for OpenAPI but are
validated by ``service.core.inputs`` (``tpugraphs.arrays``), the same code that checks
binary npz bodies, so JSON and npz clients get identical errors and field names.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.config import JsonDict

HEX64 = r"^[0-9a-f]{64}$"
VERSION = r"^[0-9]+$"
NPZ_MEDIA_TYPE = "application/x-npz"


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StrictWire(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _doc(schema: dict[str, Any], description: str) -> WithJsonSchema:
    return WithJsonSchema({**schema, "description": description})


def _rows(width: int, kind: str = "number") -> dict[str, Any]:
    row = {
        "type": "array",
        "items": {"type": kind},
        "minItems": width,
        "maxItems": width,
    }
    return {"type": "array", "items": row}


_OPCODES = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 120}}
_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}}
_CONFIGS = {"oneOf": [_rows(24), {"type": "array", "items": _rows(18)}]}

NodeFeat = Annotated[
    list[Any], _doc(_rows(140), "float32 [N,140]: one row per instruction")
]
NodeOpcode = Annotated[list[Any], _doc(_OPCODES, "opcode ids [N], 0..120")]
EdgeIndex = Annotated[
    list[Any], _doc(_rows(2, "integer"), "[E,2]; [u,v]: u consumes v")
]
NodeConfigIds = Annotated[list[Any], _doc(_IDS, "layout only: configurable nodes [NC]")]
Configs = Annotated[
    list[Any],
    _doc(_CONFIGS, "tile: config_feat [C,24]; layout: node_config_feat [C,NC,18]"),
]

_EXAMPLE_GRAPH: JsonDict = {
    "node_feat": [[0.0] * 140, [0.0] * 140],
    "node_opcode": [63, 2],
    "edge_index": [[1, 0]],
}


class GraphIn(StrictWire):
    """A graph as JSON: the TpuGraphs arrays (``node_config_ids`` for layout only)."""

    model_config = ConfigDict(json_schema_extra={"examples": [_EXAMPLE_GRAPH]})
    node_feat: NodeFeat
    node_opcode: NodeOpcode
    edge_index: EdgeIndex
    node_config_ids: NodeConfigIds | None = None


class RankIn(StrictWire):
    """Rank configs for one graph: exactly one of ``graph_id`` and ``graph``."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "tile",
                    "graph_id": "0" * 64,
                    "configs": [[0.0] * 24],
                    "top_k": 1,
                }
            ]
        }
    )
    model: str = Field(min_length=1, max_length=64)
    model_version: str | None = Field(None, pattern=VERSION)
    graph_id: str | None = Field(None, pattern=HEX64)
    graph: GraphIn | None = None
    configs: Configs
    top_k: int | None = Field(None, ge=1, description="default: all configs")


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
                }
            ]
        }
    )
    model: str
    model_version: str
    graph_id: str
    cache: Literal["memory", "redis", "miss"]
    ranking: list[int] = Field(
        description="all config indices, best first; ties by index"
    )
    scores: list[float] = Field(description="scores[i] is config i's; lower = faster")
    top_k: list[int] = Field(description="the first top_k entries of ranking")


class TensorSpecOut(Wire):
    name: str
    dtype: str
    shape: list[int | str]


class ModelOut(Wire):
    name: str
    collection: Literal["tile", "layout"]
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
    401: "unauthorized: no bearer token",
    403: "forbidden: wrong token, or the admin API is disabled",
    404: "model_not_found or graph_not_found (upload the graph, then retry)",
    409: "model_version_not_loaded, or reload_failed (the old version keeps serving)",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request: the field names the offending input",
    503: "not_ready or overloaded; see Retry-After",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries so OpenAPI shows the error model for each status."""
    return {s: {"model": ErrorOut, "description": _ERRORS[s]} for s in statuses}


def binary_body(
    json_model: type[BaseModel], *, required: bool = True
) -> dict[str, Any]:
    """``openapi_extra`` for a body that is JSON or an npz archive."""
    ref = {"$ref": f"#/components/schemas/{json_model.__name__}"}
    binary = {"type": "string", "format": "binary"}
    return {
        "requestBody": {
            "required": required,
            "content": {
                "application/json": {"schema": ref},
                NPZ_MEDIA_TYPE: {"schema": binary},
            },
        }
    }


BODY_MODELS: tuple[type[BaseModel], ...] = (GraphIn, RankIn)
