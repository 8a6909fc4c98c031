"""Wire schemas (v1): strict request bodies, responses, and the one error shape.

Graph and config arrays are declared with their JSON shapes for OpenAPI but are
validated by ``xla_costmodel.service.core.inputs`` (``xla_costmodel.tpugraphs.arrays``),
the same code that checks binary npz bodies, so JSON and npz clients get identical
errors and field names.

One module per route group, all re-exported here:

    common      patterns, strict base models, float32 bounds, description helpers
    graphs      the graph arrays and config batches; PUT /v1/graphs
    rank        POST /v1/rank (body, query, answer, npz headers)
    feedback    POST /v1/feedback
    decisions   POST /v1/decisions, GET /v1/best
    models      GET /v1/models, reloads, GET /v1/targets
    health      liveness and readiness
    errors      the error shape and the ``responses=`` entries showing it
    openapi     ``openapi_extra`` for routes that read their own input
"""

from __future__ import annotations

from pydantic import BaseModel

from xla_costmodel.service.schemas.common import (
    COMPILER,
    HEX64,
    HLO_MEDIA_TYPE,
    NPZ_MEDIA_TYPE,
    RANKING_ID,
    TARGET,
    VERSION,
    JsonInt,
    StrictWire,
    Wire,
)
from xla_costmodel.service.schemas.decisions import BestOut, DecisionIn, DecisionOut
from xla_costmodel.service.schemas.errors import (
    ErrorDetail,
    ErrorOut,
    error_responses,
)
from xla_costmodel.service.schemas.feedback import FeedbackIn, FeedbackOut
from xla_costmodel.service.schemas.graphs import GraphIn, GraphOut
from xla_costmodel.service.schemas.health import (
    LiveOut,
    ModelStatusOut,
    ReadyOut,
    V2LiveOut,
    V2ReadyOut,
)
from xla_costmodel.service.schemas.models import (
    ModelOut,
    ModelsOut,
    ReloadOut,
    TargetOut,
    TargetsOut,
    TensorSpecOut,
)
from xla_costmodel.service.schemas.openapi import (
    binary_body,
    json_only_body,
    query_parameters,
)
from xla_costmodel.service.schemas.rank import (
    RANK_NPZ_HEADERS,
    RankIn,
    RankOut,
    RankQuery,
)

# The JSON bodies that routes read by hand: the app adds them to OpenAPI's components.
BODY_MODELS: tuple[type[BaseModel], ...] = (GraphIn, RankIn, FeedbackIn, DecisionIn)

__all__ = [
    "BODY_MODELS",
    "COMPILER",
    "HEX64",
    "HLO_MEDIA_TYPE",
    "NPZ_MEDIA_TYPE",
    "RANKING_ID",
    "RANK_NPZ_HEADERS",
    "TARGET",
    "VERSION",
    "BestOut",
    "DecisionIn",
    "DecisionOut",
    "ErrorDetail",
    "ErrorOut",
    "FeedbackIn",
    "FeedbackOut",
    "GraphIn",
    "GraphOut",
    "JsonInt",
    "LiveOut",
    "ModelOut",
    "ModelStatusOut",
    "ModelsOut",
    "RankIn",
    "RankOut",
    "RankQuery",
    "ReadyOut",
    "ReloadOut",
    "StrictWire",
    "TargetOut",
    "TargetsOut",
    "TensorSpecOut",
    "V2LiveOut",
    "V2ReadyOut",
    "Wire",
    "binary_body",
    "error_responses",
    "json_only_body",
    "query_parameters",
]
