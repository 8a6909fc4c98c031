"""Config encoders and decoders: raw tuning configs <-> TpuGraphs config features.

Tile (``config_feat`` [C,24]): a TileSizeConfig's kernel, output and input bounds,
each as its first 6 entries (0-padded), its sum and its product, where the product
of an EMPTY list is 0 (unlike the node features, where it is 1).

Layout (``node_config_feat`` [C,NC,18]): for each configurable node the
minor-to-major dims of its output, first input and kernel (conv/dot second operand),
6 slots each, -1 where unused; a tensor of all -1 means "the compiler chooses".

Decoding is exact for real data. A tile list longer than 6 cannot be recovered from
its first 6 entries, sum and product, so ``decode_tile`` refuses it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.spec import LAYOUT_CONFIG_DIM, TILE_CONFIG_DIM

TILE_FIELDS = ("kernel_bounds", "output_bounds", "input_bounds")
LAYOUT_TENSORS = ("output", "input", "kernel")
SLOTS = 6  # entries kept per list / tensor
_INT64_MAX = 2**63 - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)
F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class TileSizes:
    """The bounds of one TileSizeConfig (iteration bounds are not a feature)."""

    kernel_bounds: list[int] = field(default_factory=list)
    output_bounds: list[int] = field(default_factory=list)
    input_bounds: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class NodeLayout:
    """Minor-to-major dims of one node's tensors; None (or []) lets the compiler choose."""

    output: list[int] | None = None
    input: list[int] | None = None
    kernel: list[int] | None = None


# Mapping is invariant in its key type, so each keying style is spelled out: a
# decode_layout result (keyed by int) must type-check as encode_layout input.
LayoutConfig = (
    Mapping[int, NodeLayout] | Mapping[str, NodeLayout] | Mapping[str | int, NodeLayout]
)


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


# ---------------------------------------------------------------------------- tile


def encode_tile(configs: Sequence[TileSizes]) -> F32:
    """``config_feat`` [C,24] of tile configs; GraphFormatError names the bad field."""
    rows = []
    for c, config in enumerate(configs):
        row: list[float] = []
        for name in TILE_FIELDS:
            key = f"configs[{c}].{name}"
            values = _tile_list(getattr(config, name, None), key)
            first = values[:SLOTS]
            row += [float(v) for v in first] + [0.0] * (SLOTS - len(first))
            row += [float(sum(values)), _tile_product(values, key)]
        rows.append(row)
    return np.array(rows, dtype=np.float32).reshape(-1, TILE_CONFIG_DIM)


def _tile_list(values: Any, key: str) -> list[int]:
    if not isinstance(values, Sequence) or isinstance(values, str):
        raise GraphFormatError(key, "expected a list of tile sizes")
    for j, value in enumerate(values):
        # Zero would be indistinguishable from padding, so sizes must be positive.
        if not _is_int(value) or not 1 <= value <= _INT64_MAX:
            raise GraphFormatError(
                f"{key}[{j}]", f"expected a positive int64, got {value!r}"
            )
    return [int(v) for v in values]


def _tile_product(values: list[int], key: str) -> float:
    product = math.prod(values) if values else 0  # the dataset's empty product is 0
    if product > _FLOAT32_MAX:
        raise GraphFormatError(key, "the product of the sizes overflows float32")
    return float(product)


def decode_tile(row: npt.ArrayLike, key: str = "config_feat") -> TileSizes:
    """Recover the raw bounds from one ``config_feat`` row (inverse of encode_tile)."""
    arr = _finite_integers(row, key, (TILE_CONFIG_DIM,))
    lists = [
        _decode_tile_list(arr[8 * g : 8 * g + 8], f"{key}.{name}")
        for g, name in enumerate(TILE_FIELDS)
    ]
    return TileSizes(*lists)


def decode_tiles(config_feat: npt.ArrayLike) -> list[TileSizes]:
    """``decode_tile`` over every row of a [C,24] array."""
    arr = _finite_integers(config_feat, "config_feat", (None, TILE_CONFIG_DIM))
    return [decode_tile(r, f"config_feat[{c}]") for c, r in enumerate(arr)]


def _decode_tile_list(group: npt.NDArray[np.float64], key: str) -> list[int]:
    first = group[:SLOTS]
    n = int(np.argmin(first > 0)) if (first <= 0).any() else SLOTS
    values = [int(v) for v in first[:n]]
    if (first[n:] != 0).any() or (first < 0).any():
        raise GraphFormatError(key, "entries must be positive, then zero padding")
    product = math.prod(values) if values else 0
    if (
        np.float32(sum(values)) != group[SLOTS]
        or np.float32(product) != group[SLOTS + 1]
    ):
        raise GraphFormatError(
            key,
            "sum/product do not match the first 6 entries (a list longer than 6 "
            "cannot be decoded exactly)",
        )
    return values


# -------------------------------------------------------------------------- layout


def encode_layout(
    configs: Sequence[LayoutConfig],
    node_config_ids: Sequence[int] | npt.NDArray[np.integer[Any]],
    node_names: Sequence[str] | None = None,
    tensor_ranks: Sequence[Sequence[int]] | None = None,
) -> F32:
    """``node_config_feat`` [C,NC,18] of per-node layout assignments.

    Keys are node ids or (with ``node_names``, e.g. ``HloGraph.node_names``)
    instruction names; nodes a config leaves out are "compiler chooses".
    ``tensor_ranks`` (``HloGraph.config_tensor_ranks``), aligned with
    ``node_config_ids``, enables the range check of each dim. Errors are
    GraphFormatError with a key such as ``configs[3].layouts.convolution.12.output``.
    """
    ids = [int(i) for i in node_config_ids]
    if tensor_ranks is not None and len(tensor_ranks) != len(ids):
        raise GraphFormatError(
            "tensor_ranks", f"has {len(tensor_ranks)} entries for {len(ids)} nodes"
        )
    resolver = _NodeResolver(ids, node_names)
    rows = _LayoutRows(tensor_ranks)
    row_ids = np.zeros((len(configs), len(ids)), dtype=np.int64)  # 0: all -1
    for c, config in enumerate(configs):
        if not isinstance(config, Mapping):
            raise GraphFormatError(
                f"configs[{c}]", "expected a mapping of node -> NodeLayout"
            )
        seen: set[int] = set()
        for key, layout in config.items():
            path = f"configs[{c}].layouts.{key}"
            k = resolver.position(key, path)
            if k in seen:
                raise GraphFormatError(path, "this node is set twice in one config")
            seen.add(k)
            row_ids[c, k] = rows.row_id(k, layout, path)
    return np.array(rows.rows, dtype=np.float32)[row_ids]


class _NodeResolver:
    """Maps a config key (node id or instruction name) to its position in the ids."""

    def __init__(self, ids: list[int], names: Sequence[str] | None) -> None:
        self.position_of = {node: k for k, node in enumerate(ids)}
        self.names = names
        self._node_of: dict[str, int] | None = None

    def position(self, key: object, path: str) -> int:
        node = self._node(key, path)
        if node not in self.position_of:
            raise GraphFormatError(path, f"node {node} is not a configurable node")
        return self.position_of[node]

    def _node(self, key: object, path: str) -> int:
        if isinstance(key, int | np.integer) and not isinstance(key, bool):
            return int(key)
        if not isinstance(key, str):
            raise GraphFormatError(path, "expected an instruction name or a node id")
        if self.names is None:
            raise GraphFormatError(path, "names need node_names to resolve them")
        if self._node_of is None:
            self._node_of = {}
            for k, name in enumerate(self.names):
                # -1 marks a name several nodes share, which cannot address one.
                self._node_of[name] = -1 if name in self._node_of else k
        node = self._node_of.get(key)
        if node is None:
            raise GraphFormatError(path, f"no instruction named {key!r}")
        if node < 0:
            raise GraphFormatError(path, f"several instructions are named {key!r}")
        return node


class _LayoutRows:
    """Validated 18-value rows, interned: configs repeat the same few node layouts,
    so each distinct (node, layout) is checked and encoded once."""

    def __init__(self, tensor_ranks: Sequence[Sequence[int]] | None) -> None:
        self.tensor_ranks = tensor_ranks
        self.rows = [[-1.0] * LAYOUT_CONFIG_DIM]
        self._ids: dict[tuple[object, ...], int] = {}

    def row_id(self, k: int, layout: object, path: str) -> int:
        key = _fingerprint(k, layout)
        found = None if key is None else self._ids.get(key)
        if found is not None:
            return found
        ranks = None if self.tensor_ranks is None else self.tensor_ranks[k]
        self.rows.append(_encode_node(layout, ranks, path))
        if key is not None:
            self._ids[key] = len(self.rows) - 1
        return len(self.rows) - 1


def _fingerprint(k: int, layout: object) -> tuple[object, ...] | None:
    """A hashable key for a plainly typed layout; None means "validate in full"."""
    if type(layout) is not NodeLayout:
        return None
    parts: list[object] = [k]
    for dims in (layout.output, layout.input, layout.kernel):
        if dims is None:
            parts.append(None)
        elif type(dims) in (list, tuple) and all(type(d) is int for d in dims):
            parts.append(tuple(dims))
        else:
            return None
    return tuple(parts)


def _encode_node(layout: object, ranks: Sequence[int] | None, path: str) -> list[float]:
    if not isinstance(layout, NodeLayout):
        raise GraphFormatError(path, "expected a NodeLayout")
    row = [-1.0] * LAYOUT_CONFIG_DIM
    for t, name in enumerate(LAYOUT_TENSORS):
        dims = _layout_dims(getattr(layout, name), ranks, t, f"{path}.{name}")
        row[SLOTS * t : SLOTS * t + len(dims)] = [float(d) for d in dims]
    return row


def _layout_dims(
    dims: Any, ranks: Sequence[int] | None, t: int, path: str
) -> list[int]:
    if dims is None:
        return []
    if not isinstance(dims, Sequence) or isinstance(dims, str):
        raise GraphFormatError(path, "expected a list of dims or None")
    if len(dims) > SLOTS:
        raise GraphFormatError(path, f"at most {SLOTS} dims fit, got {len(dims)}")
    if not all(_is_int(d) and d >= 0 for d in dims):
        raise GraphFormatError(path, f"dims must be integers >= 0, got {list(dims)}")
    if len(set(dims)) != len(dims):
        raise GraphFormatError(path, f"dims must be distinct, got {list(dims)}")
    if ranks is not None and dims:
        if t >= len(ranks):
            raise GraphFormatError(path, "this node has no such tensor")
        if max(dims) >= ranks[t]:
            raise GraphFormatError(
                path, f"dim {max(dims)} out of range for rank {ranks[t]}"
            )
    return [int(d) for d in dims]


def decode_layout(
    node_config_feat: npt.ArrayLike,
    node_config_ids: Sequence[int] | npt.NDArray[np.integer[Any]],
) -> list[dict[int, NodeLayout]]:
    """Raw per-node layouts (keyed by node id) of a [C,NC,18] array; inverse of
    ``encode_layout``. Every configurable node appears; all -1 decodes to None."""
    ids = [int(i) for i in node_config_ids]
    arr = _finite_integers(
        node_config_feat, "node_config_feat", (None, len(ids), LAYOUT_CONFIG_DIM)
    )
    _check_layout_slots(arr)
    # Few distinct rows repeat across configs: split each once, copy per node.
    split: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    configs = []
    for per_node in arr.astype(np.int64).tolist():
        config = {}
        for node, slots in zip(ids, per_node, strict=True):
            key = tuple(slots)
            tensors = split.get(key)
            if tensors is None:
                tensors = split[key] = _split_row(slots)
            config[node] = _node_layout(tensors)
        configs.append(config)
    return configs


def _split_row(row: list[int]) -> list[tuple[int, ...]]:
    return [
        tuple(d for d in row[SLOTS * t : SLOTS * (t + 1)] if d >= 0) for t in range(3)
    ]


def _node_layout(tensors: list[tuple[int, ...]]) -> NodeLayout:
    output, first_input, kernel = tensors
    return NodeLayout(
        list(output) if output else None,
        list(first_input) if first_input else None,
        list(kernel) if kernel else None,
    )


def _check_layout_slots(arr: npt.NDArray[np.float64]) -> None:
    tensors = arr.reshape(arr.shape[0], arr.shape[1], 3, SLOTS)
    used = tensors >= 0
    ordered = np.sort(np.where(used, tensors, -np.arange(1, SLOTS + 1)), axis=-1)
    bad = (
        (tensors < -1).any(-1)
        | (used[..., 1:] & ~used[..., :-1]).any(-1)  # a dim after an unused slot
        | (ordered[..., 1:] == ordered[..., :-1]).any(-1)  # a repeated dim
    )
    if bad.any():
        c, k, t = (int(i) for i in np.argwhere(bad)[0])
        raise GraphFormatError(
            f"node_config_feat[{c},{k}].{LAYOUT_TENSORS[t]}",
            f"expected distinct dims >= 0 then -1 padding, got {tensors[c, k, t].tolist()}",
        )


def _finite_integers(
    value: npt.ArrayLike, key: str, shape: tuple[int | None, ...]
) -> npt.NDArray[np.float64]:
    """``value`` as float64 of the given shape (None: any size), integer-valued."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise GraphFormatError(key, "expected a numeric array") from None
    if arr.ndim != len(shape) or any(
        w not in (None, s) for w, s in zip(shape, arr.shape, strict=False)
    ):
        want = ",".join("?" if w is None else str(w) for w in shape)
        raise GraphFormatError(key, f"expected shape [{want}], got {list(arr.shape)}")
    if not np.isfinite(arr).all() or (arr != np.round(arr)).any():
        raise GraphFormatError(key, "expected finite integer values")
    return arr
