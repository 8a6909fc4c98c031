"""Raw configs as JSON values -> ``TileSizes`` / ``NodeLayout`` / rows, with JSON-path errors.

The raw form the service's ``raw_configs`` and the client accept::

    tile:    {"kernel_bounds": [..], "output_bounds": [..], "input_bounds": [..]}
             a missing list is empty
    layout:  {"<node>": {"output": [dims] | null, "input": [..] | null,
                         "kernel": [..] | null}, ...}
             a missing or null tensor, or a node left out: the compiler chooses
    xla_cpu: the options as ``xla_cpu2.CompilerOptions.flat`` spells them
             (``xla_cpu2.from_options``): top-level ``compiler_options`` and the
             ``xla_backend_extra_options`` map as one "k=v,k=v" string, e.g.
             {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED",
              "xla_backend_extra_options":
                  "xla_cpu_small_while_loop_byte_threshold=65536"};
             an option left out: XLA's default ({} is the default config)

Only the shape of the objects is checked here; the sizes and dims are checked by
``encode_tile``/``encode_layout``. Errors are GraphFormatError keyed by the JSON path
(``raw_configs[3].kernel_bounds``, ``raw_configs[0].convolution.12.output``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.configs import (
    F32,
    LAYOUT_TENSORS,
    TILE_FIELDS,
    NodeLayout,
    TileSizes,
    encode_tile,
)
from xla_costmodel.tpugraphs.errors import GraphFormatError

# JSON Schema of one raw tile config (the service's OpenAPI shows it).
TILE_JSON_SCHEMA: dict[str, Any] = {
    "title": "TileSizes",
    "type": "object",
    "properties": {
        k: {"type": "array", "items": {"type": "integer", "minimum": 1}}
        for k in TILE_FIELDS
    },
    "additionalProperties": False,
}


# JSON Schema of one raw xla_cpu config: the compiler options it sets.
_YNN_NAMES = ", ".join(xla_cpu.YNN_PREFIX + t for t in xla_cpu.YNN_TYPES)
_LEVELS = ", ".join(map(str, xla_cpu2.THRESHOLD_LEVELS))
XLA_CPU_JSON_SCHEMA: dict[str, Any] = {
    "title": "CompilerOptions",
    "type": "object",
    "description": f"XLA:CPU options ({xla_cpu2.SPEC}): compiler_options, and the "
    f"{xla_cpu2.EXTRA_KEY} map spelled as XLA_FLAGS spells it; an option left out "
    "keeps XLA's default",
    "properties": {
        xla_cpu.YNN_KEY: {"type": "string", "description": f"any of {_YNN_NAMES}"},
        xla_cpu.PASSES_KEY: {
            "type": "string",
            "description": f"passes to disable: any of {', '.join(xla_cpu.PASSES)}",
        },
        xla_cpu.SCHEDULER_KEY: {
            "enum": [xla_cpu.SCHEDULER_PREFIX + s for s in xla_cpu.SCHEDULERS]
        },
        xla_cpu.EMITTERS_KEY: {"type": "boolean"},
        xla_cpu.REGION_KEY: {"type": "boolean"},
        xla_cpu2.EXTRA_KEY: {
            "type": "string",
            "description": f"map entries 'key=value,key=value'; keys: "
            f"{', '.join(sorted(xla_cpu2.KNOWN_EXTRA_KEYS))} (values {_LEVELS}; "
            f"{xla_cpu2.THRESHOLD_DEFAULT}: XLA's default), e.g. "
            f"'{xla_cpu2.THRESHOLD_KEY}=65536'",
        },
    },
    "additionalProperties": False,
}
# The keys a raw xla_cpu config may have: the top-level options and the map.
XLA_CPU_JSON_KEYS = frozenset(XLA_CPU_JSON_SCHEMA["properties"])


def tile_from_json(value: Any, path: str) -> TileSizes:
    """One tile config: a ``TileSizes`` or an object of its three lists."""
    if isinstance(value, TileSizes):
        return value
    fields = _fields(value, path, TILE_FIELDS)
    return TileSizes(**fields)


def tile_rows_from_json(items: Sequence[Any], path: str) -> F32:
    """``config_feat`` [C,24] of raw tile configs; errors keyed ``path[c].<field>``
    (the object's shape) or ``configs[c].<field>`` (a size, from ``encode_tile``)."""
    return encode_tile([tile_from_json(v, f"{path}[{c}]") for c, v in enumerate(items)])


def layout_from_json(value: Any, path: str) -> dict[Any, NodeLayout]:
    """One layout config: node (name or id, kept as given) -> its ``NodeLayout``."""
    if not isinstance(value, Mapping):
        raise GraphFormatError(
            path, "expected an object: node -> {output, input, kernel}"
        )
    return {key: node_layout_from_json(v, f"{path}.{key}") for key, v in value.items()}


def node_layout_from_json(value: Any, path: str) -> NodeLayout:
    if isinstance(value, NodeLayout):
        return value
    return NodeLayout(**_fields(value, path, LAYOUT_TENSORS))


def is_tile_json(value: Any) -> bool:
    """Whether one raw config reads as a tile config (a layout one names nodes)."""
    return isinstance(value, TileSizes) or (
        isinstance(value, Mapping) and bool(value) and set(value) <= set(TILE_FIELDS)
    )


def is_xla_cpu_json(value: Any) -> bool:
    """Whether one raw config reads as xla_cpu compiler options (it names one)."""
    return (
        isinstance(value, Mapping) and bool(value) and set(value) <= XLA_CPU_JSON_KEYS
    )


def xla_cpu_rows_from_json(items: Sequence[Any], path: str) -> F32:
    """``config_feat`` [C,20] (``xla_cpu/2``) of raw xla_cpu configs (flat option
    dicts); errors keyed ``path[c]`` with the option named in the problem."""
    rows = []
    for c, value in enumerate(items):
        if not isinstance(value, Mapping):
            raise GraphFormatError(
                f"{path}[{c}]", "expected an object of compiler options"
            )
        try:
            rows.append(xla_cpu2.from_options(value))
        except ValueError as exc:
            raise GraphFormatError(f"{path}[{c}]", str(exc)) from None
    return np.stack(rows).astype(np.float32, copy=False)


def _fields(value: Any, path: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    names = ", ".join(allowed)
    if not isinstance(value, Mapping):
        raise GraphFormatError(path, f"expected an object with {names}")
    for key in value:
        if key not in allowed:
            raise GraphFormatError(f"{path}.{key}", f"unknown field; expected {names}")
    return {str(key): v for key, v in value.items()}
