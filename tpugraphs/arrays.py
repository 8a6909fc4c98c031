"""Validated TpuGraphs arrays: a graph, and the configs + runtimes measured on it.

Validation is strict about shapes, ranges and finiteness but lenient about integer
widths: any integer dtype is accepted and converted to the canonical one, because
JSON and other producers rarely keep numpy's exact dtypes. Floats must be finite.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from xla_costmodel.tpugraphs.collections import (
    COLLECTIONS,
    CollectionSpec,
    get,
    infer,
)
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.spec import (
    CONFIG_SPEC_KEY,
    NODE_FEAT_DIM,
    NUM_OPCODES,
    Collection,
)

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class Graph:
    """What an encoder sees. ``node_config_ids`` is set for graphs of a per-node
    collection (layout) only."""

    node_feat: F32  # [N,140]
    node_opcode: U8  # [N]
    edge_index: I64  # [E,2], row [u,v]: u consumes the output of v
    node_config_ids: I64 | None = None  # [NC], increasing node indices
    node_splits: I64 | None = None  # [S] (flattened from the file's [1,S])

    @property
    def num_nodes(self) -> int:
        return int(self.node_feat.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[0])

    @property
    def num_configurable(self) -> int:
        return 0 if self.node_config_ids is None else int(self.node_config_ids.shape[0])

    @property
    def nbytes(self) -> int:
        ids = 0 if self.node_config_ids is None else self.node_config_ids.nbytes
        return (
            self.node_feat.nbytes
            + self.node_opcode.nbytes
            + self.edge_index.nbytes
            + ids
        )


@dataclass(frozen=True)
class Sample:
    """A graph with its configs and, for labelled files, measured runtimes.

    ``configs`` is the collection's config key: ``config_feat`` [C,24] for tile,
    ``node_config_feat`` [C,NC,18] for layout, ``config_feat`` [C,W] for xla_cpu.
    ``runtimes`` is raw ns; ``normalizers`` only where the collection has them.
    """

    name: str
    collection: Collection
    graph: Graph
    configs: F32
    runtimes: I64
    normalizers: I64 | None = None

    @property
    def num_configs(self) -> int:
        return int(self.configs.shape[0])

    @property
    def labelled(self) -> bool:
        """Test files hide runtimes as all zeros."""
        return bool(np.any(self.runtimes > 0))

    @property
    def spec(self) -> CollectionSpec:
        return get(self.collection)

    def targets(self) -> npt.NDArray[np.float64]:
        """Ranking targets: runtimes divided by the normaliser where the collection
        has one (tile, xla_cpu), else raw ns (layout)."""
        rt = self.runtimes.astype(np.float64)
        if self.normalizers is not None:
            return rt / np.maximum(self.normalizers.astype(np.float64), 1.0)
        return rt


def _as_array(value: Any, key: str) -> np.ndarray[Any, Any]:
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:  # ragged lists and the like
        raise GraphFormatError(
            key, f"not a rectangular numeric array ({exc})"
        ) from None
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise GraphFormatError(key, f"expected a numeric array, got dtype {arr.dtype}")
    return arr


def _floats(value: Any, key: str, *tails: tuple[int, ...]) -> F32:
    """A finite float32 array [?, *tail] for one of the ``tails`` (all one length)."""
    arr = _as_array(value, key)
    if arr.ndim != 1 + len(tails[0]) or arr.shape[1:] not in tails:
        want = " or ".join("[" + ",".join(["?", *map(str, t)]) + "]" for t in tails)
        raise GraphFormatError(key, f"expected shape {want}, got {list(arr.shape)}")
    out = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.isfinite(out).all():
        raise GraphFormatError(key, "contains NaN or infinite values")
    return out


def _ints(value: Any, key: str, ndim: int) -> I64:
    arr = _as_array(value, key)
    # Floats are accepted from JSON producers only when they hold whole numbers.
    if arr.dtype.kind == "f" and (
        not np.isfinite(arr).all() or not np.array_equal(arr, np.round(arr))
    ):
        raise GraphFormatError(key, "expected integers")
    if arr.ndim != ndim:
        raise GraphFormatError(
            key, f"expected {ndim}-D array, got shape {list(arr.shape)}"
        )
    return np.ascontiguousarray(arr, dtype=np.int64)


def make_graph(
    node_feat: Any,
    node_opcode: Any,
    edge_index: Any,
    node_config_ids: Any | None = None,
    node_splits: Any | None = None,
) -> Graph:
    """Validate and canonicalise graph arrays; raises GraphFormatError naming the key."""
    feat = _floats(node_feat, "node_feat", (NODE_FEAT_DIM,))
    n = feat.shape[0]
    if n == 0:
        raise GraphFormatError("node_feat", "graph has no nodes")
    opcode = _ints(node_opcode, "node_opcode", 1)
    if opcode.shape[0] != n:
        raise GraphFormatError(
            "node_opcode", f"has {opcode.shape[0]} entries but node_feat has {n} rows"
        )
    if opcode.size and (opcode.min() < 0 or opcode.max() >= NUM_OPCODES):
        raise GraphFormatError("node_opcode", f"ids must be in [0, {NUM_OPCODES - 1}]")
    edges = _ints(edge_index, "edge_index", 2) if np.size(edge_index) else None
    if edges is None:
        edges = np.zeros((0, 2), dtype=np.int64)
    if edges.shape[1] != 2:
        raise GraphFormatError(
            "edge_index", f"expected shape [E,2], got {list(edges.shape)}"
        )
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        raise GraphFormatError("edge_index", f"node ids must be in [0, {n - 1}]")
    ids = None
    if node_config_ids is not None:
        ids = _ints(node_config_ids, "node_config_ids", 1)
        if ids.size == 0:
            raise GraphFormatError(
                "node_config_ids", "a layout graph needs configurable nodes"
            )
        if ids.min() < 0 or ids.max() >= n:
            raise GraphFormatError(
                "node_config_ids", f"node ids must be in [0, {n - 1}]"
            )
        if np.any(np.diff(ids) <= 0):
            raise GraphFormatError("node_config_ids", "must be strictly increasing")
    splits = None
    if node_splits is not None:
        splits = _ints(node_splits, "node_splits", np.ndim(node_splits)).reshape(-1)
    return Graph(feat, opcode.astype(np.uint8), edges, ids, splits)


def make_configs(
    value: Any, graph: Graph, key: str | None = None, collection: str | None = None
) -> F32:
    """Validate a config batch against its graph: [C,W] (one row per config) or
    [C,NC,W] (per configurable node), W the ``collection``'s width; without one, any
    collection of the graph's shape will do (tile [C,24] or xla_cpu [C,W])."""
    per_node = graph.node_config_ids is not None
    specs = (
        [get(collection)]
        if collection is not None
        else [c for c in COLLECTIONS.values() if c.per_node == per_node]
    )
    key = key or specs[0].config_key
    nc = graph.num_configurable
    out = _floats(value, key, *(s for c in specs for s in c.config_shapes(nc)))
    if out.shape[0] == 0:
        raise GraphFormatError(key, "no configs given")
    # An older spec's rows (xla_cpu/1's 17 columns) become today's here, once.
    spec = next(c for c in specs if out.shape[1:] in c.config_shapes(nc))
    return spec.upgrade(out)


def _check_spec_width(spec: CollectionSpec, arrays: Mapping[str, Any]) -> None:
    """A file's rows have its declared spec's width (an xla_cpu/2 file of 17-wide
    rows is refused, not silently read as xla_cpu/1)."""
    declared = str(np.asarray(arrays[CONFIG_SPEC_KEY]))
    width = spec.spec_width(declared)
    got = np.shape(arrays[spec.config_key])
    if len(got) >= 2 and got[-1] != width:
        raise GraphFormatError(
            spec.config_key, f"{declared} rows have {width} columns, got {got[-1]}"
        )


def sample_from_arrays(
    arrays: Mapping[str, Any], name: str, collection: Collection | None = None
) -> Sample:
    """Build a validated Sample from a mapping of TpuGraphs keys (an open npz); the
    collection is inferred from the keys if not given."""
    spec = infer(arrays) if collection is None else get(collection)
    try:
        for key in spec.required_keys:
            if key not in arrays:
                raise GraphFormatError(key, "missing")
        if spec.config_spec is not None:
            spec.check_config_spec(arrays[CONFIG_SPEC_KEY])
            _check_spec_width(spec, arrays)
        graph = make_graph(
            arrays["node_feat"],
            arrays["node_opcode"],
            arrays["edge_index"],
            arrays["node_config_ids"] if spec.per_node else None,
            arrays.get("node_splits"),
        )
        configs = make_configs(arrays[spec.config_key], graph, collection=spec.name)
        runtimes = _ints(arrays["config_runtime"], "config_runtime", 1)
        if runtimes.shape[0] != configs.shape[0]:
            raise GraphFormatError(
                "config_runtime",
                f"has {runtimes.shape[0]} entries but there are {configs.shape[0]} configs",
            )
        if runtimes.min() < 0:
            raise GraphFormatError("config_runtime", "runtimes must be >= 0")
        if runtimes.min() == 0 and runtimes.max() > 0:
            raise GraphFormatError(
                "config_runtime",
                "must be all zero (an unlabelled test file) or all > 0",
            )
        norms = None
        if spec.normalizer_key is not None:
            norms = _normalizers(
                arrays[spec.normalizer_key], spec.normalizer_key, runtimes
            )
    except GraphFormatError as exc:
        raise exc.with_source(name) from None
    return Sample(name, spec.name, graph, configs, runtimes, norms)


def _normalizers(value: Any, key: str, runtimes: I64) -> I64:
    """A file's normalisers: one positive runtime (the default config's) per config."""
    norms = _ints(value, key, 1)
    if norms.shape != runtimes.shape:
        raise GraphFormatError(key, "must have one entry per config")
    if norms.min() <= 0:
        raise GraphFormatError(key, "must be > 0")
    return norms
