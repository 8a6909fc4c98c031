"""``POST /v1/decisions`` and ``GET /v1/best``: what a tuner kept for a program (the
config, its compiler options, the measured speedup) and the decision to reuse."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import numpy as np
from pydantic import ConfigDict, Field, PlainValidator, WithJsonSchema
from pydantic.config import JsonDict

from xla_costmodel.service.schemas.common import (
    COMPILER,
    FLOAT32,
    HEX64,
    TARGET,
    TARGET_DOC,
    VERSION,
    JsonInt,
    StrictWire,
    Wire,
    doc,
)
from xla_costmodel.tpugraphs.collections import COLLECTIONS

_DECISION_ROWS = {
    "oneOf": [
        {"type": "array", "items": FLOAT32, "minItems": 1},
        {
            "type": "array",
            "items": {"type": "array", "items": FLOAT32, "minItems": 1},
            "minItems": 1,
        },
    ]
}
DecisionConfig = Annotated[
    list[Any],
    doc(
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
    target: str | None = Field(None, pattern=TARGET, description=TARGET_DOC)
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
