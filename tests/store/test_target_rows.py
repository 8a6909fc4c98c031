"""What target knowledge reads of a target: each writer's newest rows, so one
writer's flood cannot push another's out (SQLite and PostgreSQL)."""

from __future__ import annotations

import numpy as np
from storekit import batch, gid, tile_graph

from xla_costmodel.service.store import MeasurementStore


def test_each_writer_keeps_its_newest_rows(store: MeasurementStore) -> None:
    graphs = [tile_graph(seed=s) for s in range(2)]
    ids = [gid(g) for g in graphs]
    for graph_id, arrays in zip(ids, graphs, strict=True):
        store.save_graph(graph_id, "tile", arrays)
    configs = np.random.default_rng(0).random((3, 24), dtype=np.float32)
    store.add_measurements(batch(ids[0], configs, writer="honest", compiler="jaxlib 1"))
    flood = np.repeat(configs[:1], 50, axis=0)
    store.add_measurements(batch(ids[1], flood, writer="flood"))
    store.add_measurements(batch(ids[1], configs[:2]))  # anonymous
    rows = store.target_measurements("tile", "tpu-v3", limit=3)
    assert sorted(rows) == sorted(ids)
    assert rows[ids[0]].writers == ("honest",) * 3
    assert rows[ids[0]].compilers == ("jaxlib 1",) * 3
    assert rows[ids[1]].writers == ("flood",) * 3 + (None,) * 2  # in id order
    assert (np.diff(rows[ids[1]].ids) > 0).all()
