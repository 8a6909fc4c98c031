"""Raw configs -> config features, encoded on the client (``xla_costmodel.tpugraphs.configs``).

Raw configs are a list of, for a graph without configurable nodes, the raw form of a
collection configured by one row (``CollectionSpec.raw``: ``TileSizes`` or dicts of
their three lists for tile, ``compiler_options`` dicts for xla_cpu), told apart by the
first config whose form says (``{}`` fits both; a list of only ``{}`` reads as tile:
send xla_cpu defaults as ``xla_cpu.default_row()`` rows); for a layout graph,
mappings node -> ``NodeLayout`` (or a dict of ``output``, ``input``, ``kernel``) where
a node is an instruction name (graphs from HLO text) or a node id (``decode_layout``
output). Anything else is taken for feature arrays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from xla_costmodel.clients.errors import InvalidRequest
from xla_costmodel.tpugraphs.arrays import F32, Graph
from xla_costmodel.tpugraphs.collections import COLLECTIONS, CollectionSpec, of_shape
from xla_costmodel.tpugraphs.config_json import layout_from_json
from xla_costmodel.tpugraphs.configs import TileSizes, encode_layout
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.spec import Collection


def is_raw(configs: Any) -> bool:
    """A non-empty list whose first item is a ``TileSizes`` or a mapping."""
    if isinstance(configs, np.ndarray | str | bytes) or not isinstance(
        configs, Sequence
    ):
        return False
    return bool(configs) and isinstance(configs[0], TileSizes | Mapping)


def config_collection(configs: Any) -> Collection | None:
    """Which collection's model ``configs`` are for, when they say: raw configs by
    their form, arrays by shape ([C,W] by W: tile or xla_cpu; [C,NC,W]: layout)."""
    if is_raw(configs):
        found = row_collection(configs)
        return (of_shape(True) if found is None else found).name
    try:
        shape = np.shape(configs)
    except ValueError:  # ragged: the validation that follows will say so
        return None
    if len(shape) not in (2, 3):
        return None
    return of_shape(len(shape) == 3, shape[-1]).name


def row_collection(configs: Sequence[Any]) -> CollectionSpec | None:
    """The collection configured by one row whose raw form the first telling config
    has, if any."""
    rows = [c for c in COLLECTIONS.values() if not c.per_node and c.raw is not None]
    for item in configs:
        for spec in rows:
            if spec.raw is not None and spec.raw.recognises(item):
                return spec
    return None


def encode_raw(
    configs: Sequence[Any],
    graph: Graph,
    node_names: Sequence[str] | None,
    tensor_ranks: Sequence[Sequence[int]] | None,
) -> F32:
    """``config_feat`` [C,W] (the raw form's collection; tile if none fits, so the
    errors say what a tile config lacks) or ``node_config_feat`` [C,NC,18]."""
    try:
        if graph.node_config_ids is None:
            spec = row_collection(configs) or of_shape(False)
            if spec.raw is None:
                raise InvalidRequest(
                    f"{spec.name} models take no raw configs", field="configs"
                )
            return spec.raw.encode(configs, "configs")
        layouts = [layout_from_json(c, f"configs[{i}]") for i, c in enumerate(configs)]
        return encode_layout(layouts, graph.node_config_ids, node_names, tensor_ranks)
    except GraphFormatError as exc:
        field = exc.key.replace(".layouts.", ".", 1)
        raise InvalidRequest(f"{field}: {exc.problem}", field=field) from None
