"""Turn decoded request arrays into validated model inputs, or ``InvalidRequest``.

Graph arrays go through ``xla_costmodel.tpugraphs.arrays.make_graph`` (the one definition of a valid
graph); configs are checked against the artifact's declared config input, with its
symbolic dimensions bound by the embedding the scorer will receive. A batch of an
older spec of the collection (``xla_cpu/1``'s 17 columns, from an old client) is
upgraded to today's rows (``CollectionSpec.upgrade``) before anything else sees it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from xla_costmodel.manifest import TensorSpec
from xla_costmodel.runner import ArtifactRunner, Embedding
from xla_costmodel.service.core.errors import InvalidRequest, PayloadTooLarge
from xla_costmodel.tpugraphs.arrays import Graph, make_graph
from xla_costmodel.tpugraphs.collections import get
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.graph_id import graph_id
from xla_costmodel.tpugraphs.spec import GRAPH_KEYS

# A graph's arrays as a request sends them: the encoder's (``spec.GRAPH_KEYS``, each
# required) and, for per-node (layout) collections, which nodes are configurable.
SENT_GRAPH_KEYS = (*GRAPH_KEYS, "node_config_ids")
# Inputs up to this size are decoded and checked on the event loop; larger ones
# (by decoded size: a compressed npz of 1 MB may hold 100 MB) in a worker thread.
INLINE_BYTES = 256 * 1024
# Edges of one graph: 10 per node at the default max_nodes (a former setting,
# COSTMODEL_MAX_EDGES; the body limits bound what a request sends as well).
MAX_EDGES = 2_000_000


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What one request may ask: built by keyword from the ``limits`` settings group
    (``Limits(**settings.limits.model_dump())``), the same names."""

    max_nodes: int
    max_configs: int
    max_decoded_bytes: int  # an npz body, uncompressed (the decoders check it)
    max_hlo_bytes: int  # characters of HLO text
    max_hlo_instructions: int
    max_scored_bytes: int  # the float32 copy of one request's configs
    max_edges: int = MAX_EDGES


@dataclass(frozen=True)
class RawGraph:
    """Graph arrays as decoded from a body; ``prefix`` makes error fields precise."""

    arrays: Mapping[str, Any]
    prefix: str = ""
    nbytes: int = 0  # decoded size (JSON: its text): big graphs are checked off-loop


def one_graph(graph_id: str | None, graph: object, hlo: object = None) -> None:
    """The one check that a request names its graph once: by ``graph_id``, or inline
    as ``graph`` arrays or ``hlo`` text (rank and feedback, JSON and npz bodies)."""
    if sum(v is not None for v in (graph_id, graph, hlo)) != 1:
        raise InvalidRequest("give exactly one of graph_id, graph or hlo", "graph_id")


def _count(value: Any) -> int:
    try:
        return len(value)
    except TypeError:  # a 0-d array: make_graph reports its shape
        return 0


def build_graph(raw: RawGraph, collection: str, limits: Limits) -> tuple[Graph, str]:
    """Validate a graph for a model of ``collection``; returns it and its graph_id."""
    arrays, prefix = raw.arrays, raw.prefix
    for key in GRAPH_KEYS:
        if key not in arrays:
            raise InvalidRequest(f"missing array {key!r}", prefix + key)
    ids = arrays.get("node_config_ids")
    per_node = get(collection).per_node
    if per_node and ids is None:
        raise InvalidRequest(
            f"a {collection} graph needs node_config_ids", prefix + "node_config_ids"
        )
    if not per_node and ids is not None:
        raise InvalidRequest(
            f"{collection} graphs take no node_config_ids", prefix + "node_config_ids"
        )
    if _count(arrays["node_feat"]) > limits.max_nodes:
        raise InvalidRequest(
            f"more than {limits.max_nodes} nodes", prefix + "node_feat"
        )
    if _count(arrays["edge_index"]) > limits.max_edges:
        raise InvalidRequest(
            f"more than {limits.max_edges} edges", prefix + "edge_index"
        )
    try:
        graph = make_graph(
            arrays["node_feat"], arrays["node_opcode"], arrays["edge_index"], ids
        )
    except GraphFormatError as exc:
        raise InvalidRequest(exc.problem, prefix + exc.key) from None
    gid = graph_id(
        graph.node_feat, graph.node_opcode, graph.edge_index, graph.node_config_ids
    )
    return graph, gid


def check_configs(
    value: Any,
    runner: ArtifactRunner,
    embedding: Embedding,
    field: str,
    limits: Limits,
    graph: Graph | None = None,
) -> np.ndarray[Any, Any]:
    """Check a config batch's dtype and shape against the scorer's config input.

    Cheap for an array (no pass over the values), so it runs on the event loop;
    nested lists are a pass over every value: decoders convert them first with
    ``config_array``, off the loop for large bodies. The batch keeps its wire dtype
    (layout configs come as int8) and ``as_float32`` converts it.
    """
    spec = runner.manifest.config_input
    arr = config_array(value, field)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise InvalidRequest(f"expected a numeric array, got dtype {arr.dtype}", field)
    if arr.ndim == 0 or arr.shape[0] == 0:
        raise InvalidRequest("no configs given", field)
    if arr.shape[0] > limits.max_configs:
        raise InvalidRequest(f"more than {limits.max_configs} configs", field)
    _bounded(arr, limits, field)
    want = _expected_shape(spec, runner, embedding)
    if graph is not None and graph.node_config_ids is not None and len(want) == 3:
        want[1] = graph.num_configurable  # [C, NC, 18]: one row per configurable node
    if not _fits(arr, want):
        # Only a batch that does not fit pays for this: an older spec's rows
        # (xla_cpu/1's 17 columns from an old client) in the artifact's width.
        arr = upgraded(arr, runner)
        _bounded(arr, limits, field)
    if not _fits(arr, want):
        shown = ",".join("?" if w is None else str(w) for w in want)
        raise InvalidRequest(
            f"{runner.name} v{runner.version} takes {spec.name} of shape [{shown}], "
            f"got {list(arr.shape)}",
            field,
        )
    return arr


def _bounded(arr: np.ndarray[Any, Any], limits: Limits, field: str) -> None:
    if arr.size * 4 > limits.max_scored_bytes:  # as_float32's copy, before it is made
        raise PayloadTooLarge(
            f"{arr.size} config values are {arr.size * 4} bytes as float32, more "
            f"than {limits.max_scored_bytes} (COSTMODEL_MAX_SCORED_BYTES)",
            field,
        )


def _fits(arr: np.ndarray[Any, Any], want: list[int | None]) -> bool:
    return arr.ndim == len(want) and all(
        w is None or w == got for w, got in zip(want[1:], arr.shape[1:], strict=True)
    )


def upgraded(arr: np.ndarray[Any, Any], runner: ArtifactRunner) -> np.ndarray[Any, Any]:
    """``arr`` in today's rows if it is an older spec's batch of one-row configs
    (``xla_cpu/1``'s [C,17]) and the artifact takes today's width; else ``arr`` as it
    is (a caller refuses a batch that does not fit). A batch of small integers (int8
    from the client) keeps its dtype, exact in the float32 upgrade: what ``recent``
    remembers stays as small as it came."""
    collection = runner.spec
    older = {o.width for o in collection.older}
    width = runner.manifest.config_input.shape[-1]
    if arr.ndim != 2 or arr.shape[1] not in older or width != collection.width:
        return arr
    out = collection.upgrade(arr)
    small = arr.dtype.kind in "biu" and arr.dtype.itemsize <= 2
    return out.astype(arr.dtype) if small else out


def config_array(value: Any, field: str) -> np.ndarray[Any, Any]:
    """``np.asarray(value)``, or ``InvalidRequest`` for ragged nested lists."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise InvalidRequest(
            f"not a rectangular numeric array ({exc})", field
        ) from None


def as_float32(arr: np.ndarray[Any, Any], field: str) -> npt.NDArray[np.float32]:
    """The scorer's float32 C-order input, refused if it holds NaN or infinity.

    A pass over every value (15M for 1,001 nlp layout configs): call it in the
    scoring thread. Integer batches skip the check: they cannot hold NaN, and any
    int64 is finite as float32.
    """
    out = np.ascontiguousarray(arr, dtype=np.float32)
    if arr.dtype.kind == "f" and not np.isfinite(out).all():
        raise InvalidRequest("contains NaN or infinite values", field)
    return out


def _expected_shape(
    spec: TensorSpec, runner: ArtifactRunner, embedding: Embedding
) -> list[int | None]:
    """The config shape with symbolic dims bound from the embedding's actual shapes."""
    bound: dict[str, int] = {}
    for out in runner.manifest.embedding_specs:
        actual = embedding.get(out.name)
        if actual is None or actual.ndim != len(out.shape):
            continue
        for dim, size in zip(out.shape, actual.shape, strict=True):
            if isinstance(dim, str):
                bound.setdefault(dim, int(size))
    return [dim if isinstance(dim, int) else bound.get(dim) for dim in spec.shape]
