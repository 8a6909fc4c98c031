"""``POST /v1/feedback``: measured runtimes of configs of a graph, and the answer
(what was stored, and how well the model's scores ordered them)."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from xla_costmodel.service.schemas.common import (
    COMPILER,
    HEX64,
    INT64_MAX,
    RANKING_ID,
    TARGET,
    TARGET_DOC,
    VERSION,
    JsonInt,
    StrictWire,
    Wire,
    doc,
)
from xla_costmodel.service.schemas.graphs import (
    ONE_GRAPH,
    Configs,
    ConfigurableNames,
    GraphIn,
    exactly_one,
)

_COMPILER_DOC = (
    "the compiler build the runtimes were measured under (free text, e.g. "
    "jax/jaxlib versions and the XLA commit); null or absent: unknown"
)
_INDICES = {"type": "array", "items": {"type": "integer", "minimum": 0}}
_RUNTIMES = {
    "type": "array",
    "items": {"type": "integer", "minimum": 1, "maximum": INT64_MAX},
    "minItems": 1,
}
ConfigIndices = Annotated[
    list[JsonInt], doc(_INDICES, "indices into the configs of the latest rank request")
]
RuntimesNs = Annotated[list[JsonInt], doc(_RUNTIMES, "measured runtime per config, ns")]


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
                ONE_GRAPH,
                exactly_one({"configs": "array", "config_indices": "array"}),
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
    target: str | None = Field(None, pattern=TARGET, description=TARGET_DOC)
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
