"""Caller inputs → validated arrays → wire bytes, and the graph's canonical id.

A graph may be given as a ``tpugraphs`` ``Graph`` or ``Sample`` (``load_npz``), as
any mapping of TpuGraphs keys (a dict of arrays, or an open ``np.load`` file), as a
path to an npz file, as HLO text (``xla_costmodel.clients.hlo``: featurized here), or as an already
``PreparedGraph``. Configs are feature arrays or raw configs (``clients.raw_configs``),
built for the model's collection (``CollectionSpec``, which the client learns by the
model's name). Validation is the format core's, so the client rejects locally what
the service would reject with a 422.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
from numpy.lib import format as npy_format

from xla_costmodel.clients.errors import InvalidRequest
from xla_costmodel.clients.hlo import Hlo, as_hlo, featurize, resolve
from xla_costmodel.clients.raw_configs import encode_raw, is_raw
from xla_costmodel.tpugraphs.arrays import Graph, Sample, make_configs, make_graph
from xla_costmodel.tpugraphs.collections import CollectionSpec
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.graph_id import graph_id

NPZ = "application/x-npz"


@dataclass(frozen=True)
class PreparedGraph:
    """A validated graph with its id computed once; reuse it across calls."""

    graph: Graph
    graph_id: str
    # From HLO text: every node's instruction name, and the tensor ranks of the
    # configurable nodes, so raw layout configs may name nodes and are range-checked.
    node_names: tuple[str, ...] | None = None
    config_tensor_ranks: tuple[tuple[int, ...], ...] | None = None

    @cached_property
    def npz_bytes(self) -> bytes:
        """The upload body (``np.savez`` of the graph keys), built on first use."""
        return savez_bytes(self.arrays)

    @property
    def arrays(self) -> dict[str, np.ndarray[Any, Any]]:
        """The graph's wire arrays, as uploaded or sent inline with a rank."""
        arrays: dict[str, np.ndarray[Any, Any]] = {
            "node_feat": self.graph.node_feat,
            "node_opcode": self.graph.node_opcode,
            "edge_index": self.graph.edge_index,
        }
        if self.graph.node_config_ids is not None:
            arrays["node_config_ids"] = self.graph.node_config_ids
        return arrays


GraphInput: TypeAlias = (
    Graph | Sample | Mapping[str, Any] | str | os.PathLike[str] | Hlo | PreparedGraph
)


def prepare_graph(
    value: GraphInput, configs: Any = None, collection: CollectionSpec | None = None
) -> PreparedGraph:
    """Validate any accepted graph input and hash it with ``xla_costmodel.tpugraphs.graph_id``.

    ``Hlo(configurable="auto")`` is settled by the model's ``collection`` (whether it
    configures nodes), else by the form of ``configs`` (tile or layout).
    """
    if isinstance(value, PreparedGraph):
        return value
    if isinstance(value, Hlo):
        return _prepare_hlo(resolve(value, configs, collection))
    hlo = as_hlo(value)
    if hlo is not None:
        return _prepare_hlo(resolve(hlo, configs, collection))
    try:
        graph = _to_graph(value)
    except GraphFormatError as exc:
        raise InvalidRequest(str(exc), field=exc.key) from None
    ids = graph.node_config_ids
    gid = graph_id(graph.node_feat, graph.node_opcode, graph.edge_index, ids)
    return PreparedGraph(graph, gid)


def _prepare_hlo(hlo: Hlo) -> PreparedGraph:
    featurized = featurize(hlo)
    try:
        graph = featurized.to_graph()
    except GraphFormatError as exc:
        raise InvalidRequest(str(exc), field=exc.key) from None
    ids = graph.node_config_ids
    gid = graph_id(graph.node_feat, graph.node_opcode, graph.edge_index, ids)
    ranks = featurized.config_tensor_ranks
    return PreparedGraph(
        graph,
        gid,
        tuple(featurized.node_names),
        None if ranks is None else tuple(tuple(r) for r in ranks),
    )


def _to_graph(
    value: Graph | Sample | Mapping[str, Any] | str | os.PathLike[str],
) -> Graph:
    if isinstance(value, Graph):
        return value
    if isinstance(value, Sample):
        return value.graph
    if isinstance(value, Mapping):
        return _graph_from_keys(value)
    path = Path(value)
    try:
        with np.load(path, allow_pickle=False) as data:
            return _graph_from_keys(data)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise GraphFormatError("file", f"cannot read npz ({exc})", str(path)) from None


def _graph_from_keys(arrays: Mapping[str, Any]) -> Graph:
    for key in ("node_feat", "node_opcode", "edge_index"):
        if key not in arrays:
            raise GraphFormatError(key, "missing")
    return make_graph(
        arrays["node_feat"],
        arrays["node_opcode"],
        arrays["edge_index"],
        arrays.get("node_config_ids"),
    )


def config_array(
    configs: Any, graph: PreparedGraph, spec: CollectionSpec
) -> npt.NDArray[np.float32]:
    """Validate configs for a ``spec`` model and the graph, encoding raw configs
    first: [C,W] (one row per config) or [C,NC,W] (per configurable node)."""
    if spec.per_node != (graph.graph.node_config_ids is not None):
        need = "needs" if spec.per_node else "takes no"
        raise InvalidRequest(
            f"a {spec.name} model {need} graphs with node_config_ids",
            field="node_config_ids",
        )
    if is_raw(configs):
        names, ranks = graph.node_names, graph.config_tensor_ranks
        configs = encode_raw(configs, graph.graph, names, ranks, spec)
    try:
        return make_configs(configs, graph.graph, collection=spec.name)
    except GraphFormatError as exc:
        raise InvalidRequest(str(exc), field=exc.key) from None


def config_count(configs: Any) -> int:
    """How many configs ``configs`` holds, whatever collection they are for."""
    try:
        return len(configs)
    except TypeError:
        raise InvalidRequest(
            "configs: expected a list or an array of configs", field="configs"
        ) from None


def configs_npz(
    configs: npt.NDArray[np.float32],
    graph: PreparedGraph,
    spec: CollectionSpec,
    inline: bool = False,
) -> bytes:
    """The binary rank body, with the graph's arrays too when ``inline``, the configs
    under the ``spec`` model's config key. Where its configs are small ints (layout:
    mostly -1; xla_cpu option codes), they go as int8 when they fit, a quarter of the
    float32 bytes; tile configs as float32."""
    wire: np.ndarray[Any, Any] = configs
    if spec.small_int_configs:
        small = _as_int8(configs)
        wire = configs if small is None else small
    arrays = graph.arrays if inline else {}
    arrays[spec.config_key] = wire
    return savez_bytes(arrays)


def _as_int8(values: npt.NDArray[np.float32]) -> npt.NDArray[np.int8] | None:
    """``values`` as int8 if that loses nothing, else None: one cast and one compare
    (half the time of min, max, round and compare on 1,001 nlp layout configs)."""
    with np.errstate(invalid="ignore"):  # NaN/inf/out-of-range cast: compared below
        small = values.astype(np.int8)
    # Equal only where the value is an integer in [-128, 127], whatever a failed cast
    # produced elsewhere.
    return small if np.array_equal(small, values) else None


def savez_bytes(arrays: Mapping[str, np.ndarray[Any, Any]]) -> bytes:
    """An npz as ``np.savez`` writes it (stored members, npy format 1.0), without
    its copies: ``np.savez`` copies each array (``tobytes``) before the zip reads it,
    here the zip reads the array's buffer in place. 15 MB of int8 layout configs
    take half the time. Arrays not in C order are copied to it first.
    """
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as archive:
        for key, value in arrays.items():
            arr = np.asarray(value)
            if not arr.flags.c_contiguous:
                arr = arr.copy(order="C")
            header = io.BytesIO()
            npy_format.write_array_header_1_0(
                header, npy_format.header_data_from_array_1_0(arr)
            )
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                member.write(header.getvalue())
                member.write(arr.data)
    return buf.getvalue()
