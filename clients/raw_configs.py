"""Raw configs -> config features, encoded on the client (``xla_costmodel.tpugraphs.configs``).

Raw configs are a list of, for a tile graph, ``TileSizes`` or dicts of their three
lists; for a layout graph, mappings node -> ``NodeLayout`` (or a dict of ``output``,
``input``, ``kernel``) where a node is an instruction name (graphs from HLO text) or
a node id (``decode_layout`` output). Anything else is taken for feature arrays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from xla_costmodel.clients.errors import InvalidRequest
from xla_costmodel.tpugraphs.arrays import F32, Graph
from xla_costmodel.tpugraphs.config_json import (
    is_tile_json,
    layout_from_json,
    tile_from_json,
)
from xla_costmodel.tpugraphs.configs import TileSizes, encode_layout, encode_tile
from xla_costmodel.tpugraphs.errors import GraphFormatError


def is_raw(configs: Any) -> bool:
    """A non-empty list whose first item is a ``TileSizes`` or a mapping."""
    if isinstance(configs, np.ndarray | str | bytes) or not isinstance(
        configs, Sequence
    ):
        return False
    return bool(configs) and isinstance(configs[0], TileSizes | Mapping)


def config_collection(configs: Any) -> Literal["tile", "layout"] | None:
    """Which kind of model ``configs`` are for, when they say (raw, [C,24], [C,NC,18])."""
    if is_raw(configs):
        return "tile" if is_tile_json(configs[0]) else "layout"
    try:
        ndim = np.ndim(configs)
    except ValueError:  # ragged: the validation that follows will say so
        return None
    return {2: "tile", 3: "layout"}.get(ndim)  # type: ignore[return-value]


def encode_raw(
    configs: Sequence[Any],
    graph: Graph,
    node_names: Sequence[str] | None,
    tensor_ranks: Sequence[Sequence[int]] | None,
) -> F32:
    """``config_feat`` [C,24] or ``node_config_feat`` [C,NC,18] of raw configs."""
    try:
        if graph.node_config_ids is None:
            return encode_tile(
                [tile_from_json(c, f"configs[{i}]") for i, c in enumerate(configs)]
            )
        layouts = [layout_from_json(c, f"configs[{i}]") for i, c in enumerate(configs)]
        return encode_layout(layouts, graph.node_config_ids, node_names, tensor_ranks)
    except GraphFormatError as exc:
        field = exc.key.replace(".layouts.", ".", 1)
        raise InvalidRequest(f"{field}: {exc.problem}", field=field) from None
