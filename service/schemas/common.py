"""What every wire schema shares: the string patterns, the strict base models, the
integral-float rule, float32 bounds and the OpenAPI description helpers."""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

HEX64 = r"^[0-9a-f]{64}$"
RANKING_ID = r"^[0-9a-f]{32}$"
VERSION = r"^[0-9]{1,64}$"  # the stores' model_version column holds 64
TARGET = (
    r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$"  # xla_costmodel.manifest.TARGET_PATTERN
)
# A compiler build as a tuner names it ("jax 0.4.31 / xla 1b2c3d"): printable ASCII
# only. It is logged, stored, answered and printed by tools: C0/C1 controls would
# rewrite a terminal's line, bidi controls (U+202E, U+2066..) reorder what it shows.
COMPILER = r"^[ -~]{1,128}$"
TARGET_DOC = (
    "the hardware the runtimes are (to be) measured on, e.g. tpu-v3; default: the "
    "model's target. Measurements of different targets are never mixed."
)
NPZ_MEDIA_TYPE = "application/x-npz"
HLO_MEDIA_TYPE = "text/x-hlo"


def integral(value: Any) -> Any:
    """JSON Schema counts 2.0 as an integer (its value is one); strict pydantic
    would refuse it, so an integral float is taken as that integer."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(integral)]
# The bound before the validator, or OpenAPI would show pydantic's "ge" keyword.
TopK = Annotated[int, Field(ge=1), BeforeValidator(integral)]
INT64_MAX = 2**63 - 1


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StrictWire(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def doc(schema: dict[str, Any], description: str) -> WithJsonSchema:
    """A field's JSON Schema as OpenAPI shows it (the decoders validate it)."""
    return WithJsonSchema({**schema, "description": description})


# Numbers become float32 arrays, which refuse what overflows to infinity (422).
FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT32 = {"type": "number", "minimum": -FLOAT32_MAX, "maximum": FLOAT32_MAX}


def header(description: str, kind: str = "string") -> dict[str, Any]:
    """An OpenAPI response header."""
    return {"description": description, "schema": {"type": kind}}
