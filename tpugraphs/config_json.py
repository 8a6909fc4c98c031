"""Raw configs as JSON values -> ``TileSizes`` / ``NodeLayout``, with JSON-path errors.

The raw form the service's ``raw_configs`` and the client accept::

    tile:    {"kernel_bounds": [..], "output_bounds": [..], "input_bounds": [..]}
             a missing list is empty
    layout:  {"<node>": {"output": [dims] | null, "input": [..] | null,
                         "kernel": [..] | null}, ...}
             a missing or null tensor, or a node left out: the compiler chooses

Only the shape of the objects is checked here; the sizes and dims are checked by
``encode_tile``/``encode_layout``. Errors are GraphFormatError keyed by the JSON path
(``raw_configs[3].kernel_bounds``, ``raw_configs[0].convolution.12.output``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xla_costmodel.tpugraphs.configs import (
    LAYOUT_TENSORS,
    TILE_FIELDS,
    NodeLayout,
    TileSizes,
)
from xla_costmodel.tpugraphs.errors import GraphFormatError


def tile_from_json(value: Any, path: str) -> TileSizes:
    """One tile config: a ``TileSizes`` or an object of its three lists."""
    if isinstance(value, TileSizes):
        return value
    fields = _fields(value, path, TILE_FIELDS)
    return TileSizes(**fields)


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


def _fields(value: Any, path: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    names = ", ".join(allowed)
    if not isinstance(value, Mapping):
        raise GraphFormatError(path, f"expected an object with {names}")
    for key in value:
        if key not in allowed:
            raise GraphFormatError(f"{path}.{key}", f"unknown field; expected {names}")
    return {str(key): v for key, v in value.items()}
