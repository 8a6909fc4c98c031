"""The canonical graph id is stable, dtype-insensitive, and sensitive to content."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pytest

from xla_costmodel.tpugraphs.graph_id import graph_id
from xla_costmodel.tpugraphs.reader import load_npz


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


def test_empty_edges_hash_as_zero_by_two() -> None:
    """``[]`` is the edgeless graph the service hashes with shape ``0,2``."""
    feat, ops = np.ones((1, 140), np.float32), np.array([3], np.uint8)
    canonical = graph_id(feat, ops, np.zeros((0, 2), np.int64))
    assert graph_id(feat, ops, []) == canonical
    assert graph_id(feat, ops, np.zeros(0, np.int32)) == canonical
    h = hashlib.sha256(b"costmodel-graph-v1\n")
    h.update(b"node_feat\n<f4\n1,140\n" + feat.tobytes())
    h.update(b"node_opcode\n|u1\n1\n" + ops.tobytes())
    h.update(b"edge_index\n<i8\n0,2\n")
    assert canonical == h.hexdigest()


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("node_opcode", [1, 256], "[0, 255]"),  # would wrap to opcode 0
        ("node_opcode", [1, -1], "[0, 255]"),  # would wrap to opcode 255
        ("node_opcode", [1.0, 2.5], "integers"),  # would truncate to 2
        ("edge_index", [[1.5, 0.0]], "integers"),
        ("edge_index", [[np.nan, 0.0]], "integers"),
        ("node_config_ids", [0.0, 2.0**70], "[-9223372036854775808"),
        ("node_opcode", ["a", "b"], "integers"),
    ],
)
def test_values_that_do_not_fit_are_refused(
    key: str, value: object, problem: str
) -> None:
    arrays: dict[str, object] = {
        "node_feat": np.ones((2, 140), np.float32),
        "node_opcode": [1, 2],
        "edge_index": [[1, 0]],
        "node_config_ids": None,
    }
    arrays[key] = value
    with pytest.raises(ValueError, match=re.escape(problem)):
        graph_id(**arrays)  # type: ignore[arg-type]


def test_integral_floats_and_wide_ints_hash_like_the_canonical_dtypes() -> None:
    feat = np.ones((2, 140), np.float32)
    canonical = graph_id(feat, np.array([1, 200], np.uint8), np.array([[1, 0]]), [0, 1])
    assert graph_id(feat, [1.0, 200.0], [[1.0, 0.0]], np.array([0, 1], np.uint64)) == (
        canonical
    )
