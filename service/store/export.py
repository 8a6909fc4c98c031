"""Measurements as TpuGraphs npz files, so ``costmodel train`` learns from them.

One file per (collection, target, graph): ``<out>/<collection>/<target>/<graph>.npz``,
with the graph's arrays in their canonical dtypes and one config per distinct measured
config. A config measured several times gets the median over its writers of each
writer's median runtime (rounded to whole ns): measurements repeat, the median shrugs
off one noisy run, and one writer's flood of rows is one vote, like another writer's
dozen. ``writers`` picks whose rows count, ``exclude`` whose do not; rows stored
without a writer (feedback auth off, imports) go by the reserved name ``anonymous``,
as in ``costmodel measurements purge``.

Each file has its collection's keys (``xla_costmodel.tpugraphs.collections``): a
collection with normalisers (tile, xla_cpu) also needs ``config_runtime_normalizers``,
in TpuGraphs the runtime of the default config. The store does not know which config
is the default, so every config gets the graph's fastest (median) runtime: targets
become slowdowns relative to the best measured config (>= 1), and the ranking, which
is all training uses, is the same as with any constant normaliser. A collection whose
files name their config encoding (xla_cpu) gets its ``config_spec``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xla_costmodel.service.store.records import StoredGraph, StoredRows
from xla_costmodel.service.store.store import MeasurementStore
from xla_costmodel.service.store.writers import ANONYMOUS
from xla_costmodel.tpugraphs.collections import get
from xla_costmodel.tpugraphs.spec import CONFIG_SPEC_KEY

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class ExportedFile:
    path: Path
    collection: str
    target: str
    graph_id: str
    configs: int  # distinct configs written
    measurements: int  # rows they summarise


@dataclass(frozen=True)
class Skipped:
    collection: str
    target: str
    graph_id: str
    reason: str


def export_dataset(
    store: MeasurementStore,
    out: Path,
    collection: str | None = None,
    target: str | None = None,
    writers: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
) -> Iterator[ExportedFile | Skipped]:
    """Write one npz per measured (collection, target, graph); yields what it did.
    With ``writers``, only the measurements those writers stored; never those of
    ``exclude`` (``ANONYMOUS``: the rows without a writer)."""
    wanted = None if writers is None else set(writers) - set(exclude)
    # One named writer: the store filters (an index), as before several could.
    only = next(iter(wanted)) if wanted is not None and len(wanted) == 1 else None
    only = None if only == ANONYMOUS else only
    for coll, tgt, graph_id in store.keys(collection, target, only):
        measured = _selected(
            store.measurements(coll, tgt, graph_id, writer=only), wanted, exclude
        )
        if len(measured) == 0:  # only others' rows
            continue
        graph = store.load_graph(graph_id)
        if graph is None:  # unreachable with the foreign key; kept for clarity
            yield Skipped(coll, tgt, graph_id, "graph not stored")
            continue
        try:
            arrays, configs = dataset_arrays(graph, measured, coll)
        except ValueError as exc:  # UnknownCollection too
            yield Skipped(coll, tgt, graph_id, str(exc))
            continue
        path = out / _component(coll) / _component(tgt) / f"{graph_id}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".npz.tmp")
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]
        tmp.replace(path)  # a reader never sees half a file
        yield ExportedFile(path, coll, tgt, graph_id, configs, len(measured))


def dataset_arrays(
    graph: StoredGraph, measured: StoredRows, collection: str | None = None
) -> tuple[dict[str, np.ndarray[Any, Any]], int]:
    """(TpuGraphs arrays, number of distinct configs) of one graph's measurements of
    ``collection`` (default: the one the graph was stored under)."""
    g = graph.arrays
    spec = get(collection or graph.collection)
    if len(measured) == 0:
        raise ValueError("no measurements")
    configs, runtimes = _median_per_config(
        measured.configs, measured.runtimes_ns, measured.writers or None
    )
    arrays: dict[str, np.ndarray[Any, Any]] = {
        "node_feat": np.asarray(g["node_feat"], dtype=np.float32),
        "node_opcode": np.asarray(g["node_opcode"], dtype=np.uint8),
        "edge_index": np.asarray(g["edge_index"], dtype=np.int64).reshape(-1, 2),
        "config_runtime": runtimes,
    }
    if spec.per_node:
        if "node_config_ids" not in g:
            raise ValueError(f"a {spec.name} graph needs node_config_ids")
        ids = np.asarray(g["node_config_ids"], dtype=np.int64)
        if configs.shape[1:] != spec.config_shape(ids.shape[0]):
            raise ValueError(
                f"{spec.name} configs of shape {list(configs.shape[1:])} do not match "
                f"{ids.shape[0]} configurable nodes x {spec.width}"
            )
        arrays["node_config_ids"] = ids
    elif configs.shape[1:] != spec.config_shape():
        raise ValueError(
            f"{spec.name} configs of shape {list(configs.shape[1:])} are not "
            f"[{spec.width}]"
        )
    arrays[spec.config_key] = configs
    if spec.per_node and "node_splits" in g:  # files hold it as [1,S]
        arrays["node_splits"] = np.asarray(g["node_splits"], np.int64).reshape(1, -1)
    if spec.normalizer_key is not None:
        arrays[spec.normalizer_key] = np.full_like(runtimes, runtimes.min())
    if spec.config_spec is not None:
        arrays[CONFIG_SPEC_KEY] = np.array(spec.config_spec)
    return arrays, int(configs.shape[0])


def _selected(
    measured: StoredRows, wanted: set[str] | None, exclude: Sequence[str]
) -> StoredRows:
    """The rows of the ``wanted`` writers (None: all) but ``exclude``'s."""
    names = [ANONYMOUS if w is None else w for w in measured.writers]
    keep = [
        i
        for i, w in enumerate(names)
        if (wanted is None or w in wanted) and w not in exclude
    ]
    if len(keep) == len(names):
        return measured
    return StoredRows(
        configs=measured.configs[keep],
        runtimes_ns=measured.runtimes_ns[keep],
        scores=measured.scores[keep],
        ids=measured.ids[keep],
        writers=tuple(measured.writers[i] for i in keep),
        compilers=tuple(measured.compilers[i] for i in keep)
        if measured.compilers
        else (),
    )


def _median_per_config(
    configs: np.ndarray[Any, Any],
    runtimes: np.ndarray[Any, Any],
    writers: Sequence[str | None] | None = None,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Distinct configs in first-measured order, each with its median runtime (with
    ``writers``, one per row: the median of each writer's median)."""
    flat = np.ascontiguousarray(configs.reshape(configs.shape[0], -1))
    _, first, inverse = np.unique(flat, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(first)  # groups in first-seen order
    rank = np.empty_like(order)
    rank[order] = np.arange(order.shape[0])
    group = rank[inverse]
    by_group = np.argsort(group, kind="stable")
    bounds = np.flatnonzero(np.diff(group[by_group])) + 1
    who = np.asarray(["" if w is None else "w:" + w for w in writers or []])
    parts = np.split(runtimes[by_group], bounds)
    wparts = np.split(who[by_group], bounds) if len(who) else [None] * len(parts)
    medians = [_pooled(part, w) for part, w in zip(parts, wparts, strict=True)]
    out = np.rint(np.array(medians, dtype=np.float64)).astype(np.int64)
    return np.ascontiguousarray(configs[np.sort(first)], dtype=np.float32), out


def _pooled(runtimes: np.ndarray[Any, Any], writers: Any) -> float:
    """The median of each writer's median (``writers`` None: of the runtimes)."""
    if writers is None:
        return float(np.median(runtimes))
    return float(np.median([np.median(runtimes[writers == w]) for w in set(writers)]))


def _component(name: str) -> str:
    """A collection or target as one safe path component."""
    safe = _UNSAFE.sub("_", name)
    return "_" + safe if safe in ("", ".", "..") or safe.startswith(".") else safe
