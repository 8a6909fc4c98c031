"""``POST /v1/decisions`` and ``GET /v1/best``: what a tuner kept for a program (a
config row and the paired runtimes that measured it) and the decision to reuse."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    WithJsonSchema,
)
from pydantic.config import JsonDict, JsonValue

from xla_costmodel.service.schemas.common import (
    COMPILER,
    FLOAT32,
    HEX64,
    INT64_MAX,
    TARGET,
    TARGET_DOC,
    VERSION,
    JsonInt,
    StrictWire,
    Wire,
    doc,
    integral,
)
from xla_costmodel.service.schemas.graphs import shapes_doc
from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
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
        + "; ".join(f"{c.name}: {shapes_doc(c, '')}" for c in COLLECTIONS.values())
        + "); the default row when the default was kept. An older spec's row is "
        "the same config as its upgrade (stored, answered and voted on as today's "
        "row)",
    ),
]
OptionName = Annotated[str, Field(min_length=1, max_length=200)]
MAX_OPTION_CHARS = 4096
MAX_PAIRS = 256


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
# Bounds before the validator, or OpenAPI would show pydantic's keywords (common.py).
Nanoseconds = Annotated[int, Field(gt=0, le=INT64_MAX), BeforeValidator(integral)]
Count = Annotated[int, Field(ge=0, le=2**31 - 1), BeforeValidator(integral)]
PairedRuntimes = Annotated[
    list[tuple[Nanoseconds, Nanoseconds]],
    Field(
        min_length=2,
        max_length=MAX_PAIRS,
        description="[default_ns, config_ns] per pair, the default and the config "
        "timed together in one round; stored as the writer's measurements of the "
        "graph (which must be stored: send it with feedback first)",
    ),
]
_CLAIM = "a claim of old clients: accepted, never stored (the server computes it)"
# A row that sets a top-level option and an entry of the extra-options map.
_EXAMPLE_ROW: list[JsonValue] = [
    int(v)
    for v in xla_cpu2.from_options(
        {
            xla_cpu.SCHEDULER_KEY: "CPU_SCHEDULER_TYPE_CONCURRENCY_OPTIMIZED",
            xla_cpu2.EXTRA_KEY: f"{xla_cpu2.THRESHOLD_KEY}=65536",
        }
    )
]
_EXAMPLE_DECISION: JsonDict = {
    "model": "xla_cpu",
    "target": "cpu-x86",
    "compiler": "jax 0.4.31",
    "graph_id": "0" * 64,
    "config": _EXAMPLE_ROW,
    "paired_runtimes_ns": [[1210, 1000], [1190, 1010], [1250, 990]],
    "budget": 64,
    "strategy": "model",
    "kept_default": False,
}


class RefutedIn(StrictWire):
    """The fleet's answer (``GET /v1/best``) this writer compiled and found wrong:
    counted against that exact row (docs/reuse.md, "What the fleet applies")."""

    config: DecisionConfig
    reason: Literal["slower", "outputs"] = Field(
        description="slower: than the default, in paired_runtimes_ns (their "
        "interval's upper bound below 1); outputs: different from the default's "
        "(no pairs): the row is never served under this compiler again"
    )
    paired_runtimes_ns: PairedRuntimes | None = None


class DecisionIn(StrictWire):
    """What a tuner kept for one program: one row of the model's collection, with
    the paired runtimes that measured it against the default. The service derives
    the compiler options from the row and computes the speedup from the pairs."""

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
    paired_runtimes_ns: PairedRuntimes | None = Field(
        None,
        description="required unless kept_default (422 decision_unmeasured): "
        + "[default_ns, config_ns] per pair, timed together",
    )
    compiler_options: dict[OptionName, OptionValue] | None = Field(
        None,
        max_length=256,
        description="optional: derived by the service from the config row; if "
        "sent, it must be exactly the row's (422 compiler_options), as "
        "CompilerOptions.flat spells them: the xla_backend_extra_options map as one "
        "'k=v,k=v' string",
    )
    refuted: RefutedIn | None = None
    speedup: Speedup | None = Field(None, description=_CLAIM)
    speedup_low: Speedup | None = Field(None, description=_CLAIM)
    speedup_high: Speedup | None = Field(None, description=_CLAIM)
    p_value: float | None = Field(None, ge=0, le=1, description=_CLAIM)
    pairs: Count | None = Field(None, description=_CLAIM)
    budget: JsonInt = Field(ge=0, le=2**31 - 1, description="measurements allowed")
    strategy: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,15}$",
        description="how the config was found: model, random, reuse (taken from "
        "GET /v1/best), ...",
    )
    kept_default: bool = Field(
        description="tuning kept the compiler's default (config: the default row; "
        "no pairs, but the writer must have measured the graph)"
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
    compiler_options: dict[str, str | bool | int | float] = Field(
        description="derived from the config row ({} for the default)"
    )
    speedup: float = Field(description="median of default / config over the pairs")
    speedup_low: float
    speedup_high: float | None
    p_value: float | None = Field(
        description="one-sided signed-rank: that the config is no faster"
    )
    pairs: int
    replaced: bool = Field(
        description="this writer's older decision of the program and compiler "
        "was replaced"
    )


class BestOut(Wire):
    """The decision to reuse for a program (``service/core/best.py``)."""

    graph_id: str
    target: str
    config: list[Any] = Field(description="the kept row ([width] or [NC,width])")
    compiler_options: dict[str, str | bool | int | float] = Field(
        description="derived from config by the service ({} for the default); "
        "clients derive them from config themselves"
    )
    speedup: float = Field(
        description="of the supporter with the (lower) median speedup_low"
    )
    speedup_low: float
    p_value: float | None
    writers: int = Field(
        ge=1,
        description="supporters: distinct writers whose newest decision of the "
        "program is this row under this compiler, measured faster (or the kept "
        "default); anonymous decisions count as one",
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
