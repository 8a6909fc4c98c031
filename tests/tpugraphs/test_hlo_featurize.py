"""The HLO text featurizer against real TpuGraphs files, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.hlo import featurize_hlo
from xla_costmodel.tpugraphs.hlo.cli import featurize_file
from xla_costmodel.tpugraphs.spec import OPCODE_IDS

SHARED = Path(__file__).resolve().parents[2] / "datasets" / "tpugraphs"
UNET_HLO = SHARED / "hlo" / "unet_3d.4x4.bf16.hlo.txt"
UNET_NPZ = (
    SHARED / "npz" / "layout" / "xla" / "default" / "valid" / "unet_3d.4x4.bf16.npz"
)
TILE_NPZ = SHARED / "pb" / "official_testdata" / "op_tuning_data.converted"
TILE_HLO = sorted((SHARED / "hlo" / "tile").glob("*.hlo.txt"))
TILE_MATCHED = [
    p for p in TILE_HLO if (TILE_NPZ / f"{p.name[: -len('.hlo.txt')]}.npz").exists()
]
JAX_HLO = sorted((SHARED / "hlo" / "jax").glob("*.hlo.txt"))


@pytest.fixture(scope="module")
def unet_real() -> dict[str, np.ndarray]:
    with np.load(UNET_NPZ) as data:
        return {key: data[key] for key in data.files}


@pytest.fixture(scope="module")
def unet_text() -> str:
    return UNET_HLO.read_text()


def test_unet_reproduces_the_real_layout_file(
    unet_text: str, unet_real: dict[str, np.ndarray]
) -> None:
    graph = featurize_hlo(unet_text)
    assert graph.node_feat.shape == (3163, 140)
    assert graph.node_feat.dtype == np.float32
    assert np.array_equal(graph.node_feat, unet_real["node_feat"])
    assert graph.node_opcode.dtype == np.uint8
    assert np.array_equal(graph.node_opcode, unet_real["node_opcode"])
    assert graph.edge_index.shape == (5112, 2)
    assert graph.edge_index.dtype == np.int64
    assert np.array_equal(graph.edge_index, unet_real["edge_index"])
    assert np.array_equal(graph.node_splits, unet_real["node_splits"].ravel())
    assert graph.node_config_ids is not None
    assert np.array_equal(graph.node_config_ids, unet_real["node_config_ids"])
    opcodes = [graph.node_opcode[i] for i in graph.node_config_ids]
    assert (opcodes.count(26), opcodes.count(75)) == (53, 9)  # convolutions, reshapes


def test_unet_featurizes(unet_text: str) -> None:
    """Completes (speed is measured in benchmarks, not asserted here)."""
    assert featurize_hlo(unet_text).num_nodes == 3163


def test_unet_node_names_follow_node_order(unet_text: str) -> None:
    graph = featurize_hlo(unet_text)
    assert len(graph.node_names) == graph.num_nodes == 3163
    assert graph.node_names[:3] == ["x.1520", "y.1521", "add.1522"]
    assert not any(name.startswith("%") for name in graph.node_names)
    graph.to_graph()  # validates


def test_tile_kernels_have_labelled_counterparts() -> None:
    assert len(TILE_MATCHED) >= 5, "no tile HLO matched a converted npz"


@pytest.mark.parametrize("hlo", TILE_MATCHED, ids=lambda p: p.name)
def test_tile_kernel_reproduces_converted_npz(hlo: Path) -> None:
    graph = featurize_hlo(hlo.read_text(), configurable=None)
    with np.load(TILE_NPZ / f"{hlo.name[: -len('.hlo.txt')]}.npz") as real:
        assert np.array_equal(graph.node_feat, real["node_feat"])
        assert np.array_equal(graph.node_opcode, real["node_opcode"])
        assert np.array_equal(graph.edge_index, real["edge_index"])
    assert graph.node_config_ids is None
    assert graph.to_graph().node_config_ids is None  # configured by one row


def test_jax_programs_are_present() -> None:
    assert len(JAX_HLO) == 8


@pytest.mark.parametrize("hlo", JAX_HLO, ids=lambda p: p.name)
def test_jax_program_featurizes_into_a_valid_graph(hlo: Path) -> None:
    graph = featurize_hlo(hlo.read_text())
    g = graph.to_graph()
    n = g.num_nodes
    edges = g.edge_index
    assert edges.min() >= 0 and edges.max() < n
    assert np.all(edges[:, 0] != edges[:, 1])
    assert len(np.unique(edges, axis=0)) == len(edges)
    assert np.array_equal(edges, edges[np.lexsort((edges[:, 1], edges[:, 0]))])
    splits = graph.node_splits
    assert splits[0] == 0 and splits[-1] == n and np.all(np.diff(splits) >= 0)
    assert g.node_config_ids is not None
    assert set(graph.node_opcode[g.node_config_ids].tolist()) <= {26, 34, 75}


# Opcodes that may call computations, i.e. have an edge to a callee's root.
CALLERS = {
    OPCODE_IDS[name]
    for name in (
        "call",
        "fusion",
        "reduce",
        "while",
        "conditional",
        "map",
        "reduce-window",
        "scatter",
        "select-and-scatter",
        "sort",
        "all-reduce",
        "reduce-scatter",
        "custom-call",
        "async-start",
        "all-reduce-start",
    )
}


@pytest.mark.parametrize("hlo", JAX_HLO, ids=lambda p: p.name)
def test_only_call_edges_may_point_forward(hlo: Path) -> None:
    # Post order puts operands before users inside a computation, so operand edges
    # go to lower ids; only caller -> callee-root edges are not promised to.
    graph = featurize_hlo(hlo.read_text(), configurable=None)
    forward = [u for u, v in graph.edge_index.tolist() if u < v]
    assert all(graph.node_opcode[u] in CALLERS for u in forward)


def test_explicit_configurable_names(unet_text: str) -> None:
    graph = featurize_hlo(unet_text, configurable=["convolution.1113", "reshape.58"])
    assert graph.node_config_ids is not None
    names = [graph.node_names[i] for i in graph.node_config_ids]
    assert sorted(names) == ["convolution.1113", "reshape.58"]
    assert list(graph.node_config_ids) == sorted(graph.node_config_ids)
    assert graph.config_tensor_ranks is not None
    by_name = dict(zip(names, graph.config_tensor_ranks, strict=True))
    assert by_name == {"convolution.1113": (5, 5, 5), "reshape.58": (0, 1)}


def test_unknown_configurable_name_is_named(unet_text: str) -> None:
    with pytest.raises(GraphFormatError) as err:
        featurize_hlo(unet_text, configurable=["convolution.1113", "no_such.1"])
    assert err.value.key == "configurable[1]"
    assert "no_such.1" in str(err.value)


def test_featurize_file_writes_a_layout_style_npz(
    tmp_path: Path, unet_real: dict[str, np.ndarray]
) -> None:
    out = tmp_path / "sub" / "unet.npz"
    summary = featurize_file(UNET_HLO, out, None)
    assert summary["nodes"] == 3163 and summary["edges"] == 5112
    assert summary["configurable"] == 62
    with np.load(out) as data:
        assert sorted(data.files) == sorted(
            ["node_feat", "node_opcode", "edge_index", "node_splits", "node_config_ids"]
        )
        assert data["node_splits"].shape == (1, 8)
        for key in data.files:
            assert data[key].dtype == unet_real[key].dtype
            assert np.array_equal(data[key], unet_real[key])


def test_featurize_file_with_explicit_names(tmp_path: Path) -> None:
    hlo = SHARED / "hlo" / "tile" / "fusion.191_4ae805e53b8d2b8a.hlo.txt"
    summary = featurize_file(hlo, tmp_path / "k.npz", ["convolution.104.clone.2"])
    assert summary["configurable"] == 1
    names = featurize_hlo(hlo.read_text()).node_names
    with np.load(tmp_path / "k.npz") as data:
        (node,) = data["node_config_ids"].tolist()
    assert names[node] == "convolution.104.clone.2"
