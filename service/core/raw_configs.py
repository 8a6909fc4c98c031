"""Raw configs in a rank request -> config features, or ``InvalidRequest``.

A collection configured by one row per config encodes its raw configs with its
declared encoder (``CollectionSpec.raw``: tile sizes for tile, option dicts as
``xla_cpu2.CompilerOptions.flat`` spells them for xla_cpu, rows of ``xla_cpu/2``),
needing nothing from the graph. Per-node (layout) configs name nodes, resolved
against the graph's record (``xla_costmodel.service.core.graph_meta``): an instruction name when
the graph arrived as HLO text, or a node id (a value of ``node_config_ids``, as a
string since JSON keys are strings) either way. Nodes a config leaves out, and null
tensors, are "the compiler chooses". Errors name the JSON path, e.g.
``raw_configs[3].convolution.12.output``. CPU-bound: call it in a thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xla_costmodel.service.core.errors import InvalidRequest
from xla_costmodel.service.core.graph_meta import GraphMeta
from xla_costmodel.tpugraphs.arrays import F32
from xla_costmodel.tpugraphs.collections import get
from xla_costmodel.tpugraphs.config_json import layout_from_json
from xla_costmodel.tpugraphs.configs import NodeLayout, encode_layout
from xla_costmodel.tpugraphs.errors import GraphFormatError


@dataclass(frozen=True)
class RawConfigs:
    """``raw_configs`` as decoded from JSON, not yet checked."""

    items: Any
    field: str = "raw_configs"


def encode_raw(
    raw: RawConfigs, collection: str, meta: GraphMeta | None, max_configs: int
) -> F32:
    """The collection's config features: ``config_feat`` [C,W] of one-row configs,
    ``node_config_feat`` [C,NC,18] of per-node (layout) ones."""
    items, field = raw.items, raw.field
    if not isinstance(items, list) or not items:
        raise InvalidRequest("expected a non-empty list of configs", field)
    if len(items) > max_configs:
        raise InvalidRequest(f"more than {max_configs} configs", field)
    spec = get(collection)
    try:
        if not spec.per_node:
            if spec.raw is None:
                raise InvalidRequest(
                    f"a {collection} model takes no raw configs: send configs", field
                )
            return spec.raw.encode(items, field)
        if meta is None:
            raise RuntimeError("layout configs need the graph record")
        keys = _NodeKeys(meta)
        configs = [keys.relabel(v, f"{field}[{c}]") for c, v in enumerate(items)]
        ids = range(len(meta.node_config_ids))
        return encode_layout(configs, ids, keys.labels, meta.tensor_ranks)
    except GraphFormatError as exc:
        raise InvalidRequest(exc.problem, _json_path(exc.key, field)) from None


def _json_path(key: str, field: str) -> str:
    """``configs[3].layouts.dot.1.output`` (tpugraphs' key) -> ``raw_configs[3].dot.1.output``."""
    if key.startswith("configs["):
        key = field + key[len("configs") :]
    return key.replace(".layouts.", ".", 1)


class _NodeKeys:
    """Maps the keys a request uses to one label per configurable node: its name when
    the graph has names, else its node id. Labels are what ``encode_layout`` resolves
    (as names over the positions 0..NC-1) and what its error paths show."""

    def __init__(self, meta: GraphMeta) -> None:
        self.named = meta.names is not None
        self.labels = list(meta.names or (str(i) for i in meta.node_config_ids))
        self.position = {label: k for k, label in enumerate(self.labels)}
        self.by_id = {str(node): k for k, node in enumerate(meta.node_config_ids)}

    def relabel(self, value: Any, path: str) -> dict[str, NodeLayout]:
        out: dict[str, NodeLayout] = {}
        for key, layout in layout_from_json(value, path).items():
            label = self.labels[self._position(str(key), f"{path}.{key}")]
            if label in out:
                raise GraphFormatError(
                    f"{path}.{key}", "this node is set twice in one config"
                )
            out[label] = layout
        return out

    def _position(self, key: str, path: str) -> int:
        k = self.position.get(key, self.by_id.get(key))
        if k is not None:
            return k
        if key.isdigit():
            problem = f"node {key} is not a configurable node of this graph"
        elif self.named:
            problem = f"no configurable instruction named {key!r} in this graph"
        else:
            problem = (
                "this graph arrived as arrays, so its nodes have no names: key the "
                "config by node id (a value of node_config_ids), or upload the graph "
                "as text/x-hlo"
            )
        raise GraphFormatError(path, problem)
