"""Graphs, configs and batches shared by the store tests (fixtures are in conftest.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from xla_costmodel.service.store import MeasurementBatch
from xla_costmodel.tpugraphs.graph_id import graph_id


def layout_graph(
    seed: int = 0, nodes: int = 80, configurable: int = 62
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    edges = np.array([[i, i - 1] for i in range(1, nodes)], dtype=np.int64)
    return {
        "node_feat": rng.random((nodes, 140), dtype=np.float32),
        "node_opcode": rng.integers(1, 120, nodes).astype(np.uint8),
        "edge_index": edges,
        "node_config_ids": np.sort(rng.choice(nodes, configurable, replace=False)),
        "node_splits": np.array([[0, nodes // 2, nodes]], dtype=np.int64),
    }


def tile_graph(seed: int = 0, nodes: int = 12) -> dict[str, Any]:
    arrays = layout_graph(seed, nodes, 1)
    del arrays["node_config_ids"], arrays["node_splits"]
    return arrays


def gid(arrays: dict[str, Any]) -> str:
    return graph_id(
        arrays["node_feat"],
        arrays["node_opcode"],
        arrays["edge_index"],
        arrays.get("node_config_ids"),
    )


def layout_configs(count: int, seed: int = 0, nc: int = 62) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    return rng.integers(-1, 6, (count, nc, 18)).astype(np.int8)


def batch(
    graph: str, configs: np.ndarray[Any, Any], **overrides: Any
) -> MeasurementBatch:
    count = configs.shape[0]
    fields: dict[str, Any] = {
        "model": "layout" if configs.ndim == 3 else "tile",
        "model_version": "1",
        "collection": "layout" if configs.ndim == 3 else "tile",
        "target": "tpu-v3",
        "graph_id": graph,
        "configs": configs,
        "runtimes_ns": np.arange(1, count + 1, dtype=np.int64) * 1000,
        "scores": None,
        "request_id": "req-1",
        "source": "feedback",
    }
    fields.update(overrides)
    return MeasurementBatch(**fields)
