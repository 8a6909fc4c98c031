"""``MeasurementStore.graph_summaries``: per graph, the fastest runtime and the
default config's, on both databases."""

from __future__ import annotations

from typing import Any

import numpy as np
from storekit import batch, gid, layout_configs, layout_graph, tile_graph

from xla_costmodel.service.store import MeasurementBatch, MeasurementStore
from xla_costmodel.service.store.summary import GraphSummary, default_encodings
from xla_costmodel.tpugraphs import xla_cpu2
from xla_costmodel.tpugraphs.collections import COLLECTIONS


def xla_batch(
    graph: str, rows: np.ndarray[Any, Any], runtimes: list[int], **kw: Any
) -> MeasurementBatch:
    fields = {"model": "xla_cpu", "collection": "xla_cpu", "target": "cpu-a"} | kw
    return batch(graph, rows, runtimes_ns=np.asarray(runtimes, np.int64), **fields)


def test_the_default_is_found_in_any_dtype_and_the_best_over_every_config(
    store: MeasurementStore,
) -> None:
    arrays = tile_graph(1)
    graph = gid(arrays)
    store.save_graph(graph, "xla_cpu", arrays)
    rows = xla_cpu2.sample(4, seed=0)  # row 0 is XLA's default
    # As the service stores feedback (int8, compacted) and as an import might (f4).
    store.add_measurements(xla_batch(graph, rows.astype(np.int8), [900, 700, 950, 800]))
    store.add_measurements(xla_batch(graph, rows[:2], [850, 720]))
    # Another target and another model are summarised apart.
    store.add_measurements(xla_batch(graph, rows[1:3], [500, 400], target="cpu-b"))
    store.add_measurements(xla_batch(graph, rows[:1], [990], model="xla_cpu_v2"))

    got = sorted(store.graph_summaries(), key=lambda s: (s.model, s.target))
    assert got == [
        GraphSummary("xla_cpu", "xla_cpu", "cpu-a", graph, 6, 700, 850),
        GraphSummary("xla_cpu", "xla_cpu", "cpu-b", graph, 2, 400, None),
        GraphSummary("xla_cpu_v2", "xla_cpu", "cpu-a", graph, 1, 990, 990),
    ]


def test_collections_without_a_default_row_report_none(store: MeasurementStore) -> None:
    tile, layout = tile_graph(2), layout_graph(3)
    store.save_graph(gid(tile), "tile", tile)
    store.save_graph(gid(layout), "layout", layout)
    # A tile config that happens to equal xla_cpu's default bytes is still no default.
    tile_rows = np.zeros((2, 24), np.float32)
    tile_rows[:, : xla_cpu2.WIDTH] = xla_cpu2.default_row()
    store.add_measurements(batch(gid(tile), tile_rows))
    store.add_measurements(batch(gid(layout), layout_configs(3)))
    got = {s.collection: s for s in store.graph_summaries()}
    assert got["tile"].default_ns is None and got["tile"].best_ns == 1000
    assert got["layout"].default_ns is None and got["layout"].measurements == 3


def test_default_encodings_cover_exact_dtypes_only() -> None:
    dtypes = [dtype for dtype, _ in default_encodings((0.0, 1.0, 1.0))]
    assert "|i1" in dtypes and "<f4" in dtypes and "<f8" in dtypes
    assert "|u1" not in [d for d, _ in default_encodings((-1.0, 1.0))]
    assert [d for d, _ in default_encodings((0.5,))] == ["<f2", "<f4", "<f8"]


def test_only_xla_cpu_declares_a_fixed_default_row() -> None:
    declared = {n: c.default_config for n, c in COLLECTIONS.items()}
    assert declared == {
        "tile": None,
        "layout": None,
        "xla_cpu": tuple(xla_cpu2.default_row()),
    }
