"""The canonical graph id is stable, dtype-insensitive, and sensitive to content."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from tpugraphs.graph_id import graph_id
from tpugraphs.reader import load_npz


def test_id_matches_documented_encoding() -> None:
    feat = np.arange(280, dtype=np.float32).reshape(2, 140)
    ops = np.array([63, 2], np.uint8)
    edges = np.array([[1, 0]], np.int64)
    h = hashlib.sha256(b"costmodel-graph-v1\n")
    h.update(b"node_feat\n<f4\n2,140\n" + feat.astype("<f4").tobytes())
    h.update(b"node_opcode\n|u1\n2\n" + ops.tobytes())
    h.update(b"edge_index\n<i8\n1,2\n" + edges.astype("<i8").tobytes())
    assert graph_id(feat, ops, edges) == h.hexdigest()


def test_id_ignores_input_dtypes_and_containers() -> None:
    feat = np.ones((3, 140), np.float64)
    a = graph_id(
        feat, np.array([1, 2, 3], np.int64), np.array([[1, 0], [2, 1]], np.int32)
    )
    b = graph_id(feat.tolist(), [1, 2, 3], [[1, 0], [2, 1]])
    assert a == b and len(a) == 64


def test_id_changes_with_any_array(shared_data: Path) -> None:
    g = load_npz(
        shared_data / "npz/layout/xla/default/valid/unet_3d.4x4.bf16.npz"
    ).graph
    base = graph_id(g.node_feat, g.node_opcode, g.edge_index, g.node_config_ids)
    feat = g.node_feat.copy()
    feat[100, 5] += 1
    assert graph_id(feat, g.node_opcode, g.edge_index, g.node_config_ids) != base
    assert (
        graph_id(g.node_feat, g.node_opcode, g.edge_index[:-1], g.node_config_ids)
        != base
    )
    assert (
        graph_id(g.node_feat, g.node_opcode, g.edge_index, g.node_config_ids[:-1])
        != base
    )
    # A layout graph and the same arrays without configurable nodes are different graphs.
    assert graph_id(g.node_feat, g.node_opcode, g.edge_index) != base
