"""Raw configs -> config features, encoded on the client (``xla_costmodel.tpugraphs.configs``).

Raw configs are a list of, for a model configured by one row, its collection's raw
form (``CollectionSpec.raw``: ``TileSizes`` or dicts of their three lists for tile,
``compiler_options`` dicts for xla_cpu); for a layout model, mappings node ->
``NodeLayout`` (or a dict of ``output``, ``input``, ``kernel``) where a node is an
instruction name (graphs from HLO text) or a node id (``decode_layout`` output).
Anything else is taken for feature arrays. The model's collection, learnt by name
from ``GET /v1/models``, says which encoder applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from xla_costmodel.clients.errors import InvalidRequest
from xla_costmodel.tpugraphs.arrays import F32, Graph
from xla_costmodel.tpugraphs.collections import COLLECTIONS, CollectionSpec
from xla_costmodel.tpugraphs.config_json import layout_from_json
from xla_costmodel.tpugraphs.configs import TileSizes, encode_layout
from xla_costmodel.tpugraphs.errors import GraphFormatError


def is_raw(configs: Any) -> bool:
    """A non-empty list whose first item is a ``TileSizes`` or a mapping."""
    if isinstance(configs, np.ndarray | str | bytes) or not isinstance(
        configs, Sequence
    ):
        return False
    return bool(configs) and isinstance(configs[0], TileSizes | Mapping)


def configs_per_node(configs: Any) -> bool | None:
    """Whether ``configs`` configure each configurable node, when their form says:
    raw configs unless one has a one-row collection's raw form, arrays by rank
    ([C,NC,W] per node, [C,W] not). Only for HLO text whose model is not known yet
    (``prepare_graph(hlo, configs)``); a rank uses the model's collection."""
    if is_raw(configs):
        rows = [c.raw for c in COLLECTIONS.values() if not c.per_node and c.raw]
        return not any(raw.recognises(item) for item in configs for raw in rows)
    try:
        shape = np.shape(configs)
    except ValueError:  # ragged: the validation that follows will say so
        return None
    return {2: False, 3: True}.get(len(shape))


def encode_raw(
    configs: Sequence[Any],
    graph: Graph,
    node_names: Sequence[str] | None,
    tensor_ranks: Sequence[Sequence[int]] | None,
    spec: CollectionSpec,
) -> F32:
    """The configs of a ``spec`` model: ``config_feat`` [C,W] by its raw encoder, or
    ``node_config_feat`` [C,NC,18] (per node) for ``graph``'s configurable nodes."""
    try:
        if not spec.per_node or graph.node_config_ids is None:
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
