"""The reader and validation on the real files, and every malformed-array case."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from xla_costmodel.tpugraphs.arrays import make_configs, make_graph
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.reader import expand_paths, iter_samples, load_npz

UNET = "npz/layout/xla/default/valid/unet_3d.4x4.bf16.npz"
FUSION = "pb/official_testdata/op_tuning_data.converted/fusion.191_4ae805e53b8d2b8a.npz"


def test_every_real_npz_loads(shared_data: Path) -> None:
    files = [p for p in expand_paths([shared_data / "npz", shared_data / "pb"])]
    assert len(files) >= 25
    for path in files:
        sample = load_npz(path)
        g = sample.graph
        assert g.node_feat.dtype == np.float32 and g.node_feat.shape[1] == 140
        assert g.edge_index.dtype == np.int64
        if sample.collection == "layout":
            assert sample.configs.shape[1:] == (g.num_configurable, 18)
            assert g.node_splits is not None and g.node_splits[-1] == g.num_nodes
        else:
            assert sample.configs.shape[1] == 24 and sample.normalizers is not None


def test_layout_file_matches_manifest_figures(shared_data: Path) -> None:
    s = load_npz(shared_data / UNET)
    assert (s.collection, s.graph.num_nodes, s.graph.num_edges) == (
        "layout",
        3163,
        5112,
    )
    assert s.num_configs == 1965 and s.graph.num_configurable == 62
    assert s.labelled and s.runtimes.min() == 910_852_739
    assert list(s.graph.node_splits) == [0, 449, 453, 467, 471, 498, 502, 3163]


def test_tile_targets_are_divided_by_normalizer(shared_data: Path) -> None:
    s = load_npz(shared_data / FUSION)
    assert s.normalizers is not None
    np.testing.assert_allclose(s.targets(), s.runtimes / 151565)
    assert s.targets().min() == pytest.approx(137344 / 151565)


def test_iter_samples_filters_collection_and_labels(shared_data: Path) -> None:
    tile = list(iter_samples([shared_data / "npz"], collection="tile"))
    assert {s.collection for s in tile} == {"tile"} and len(tile) == 7
    labelled = list(iter_samples([shared_data / "npz"], "tile", labelled_only=True))
    assert [Path(s.name).name for s in labelled] == [
        "retinanet.2x2.fp32_-342c949e14733d96.npz"
    ]


def _real_tile_arrays(shared_data: Path) -> dict[str, np.ndarray]:
    with np.load(shared_data / FUSION, allow_pickle=False) as d:
        return {k: d[k] for k in d.files}


def _write(tmp_path: Path, arrays: dict[str, np.ndarray]) -> Path:
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    ("mutate", "key", "problem"),
    [
        (lambda a: a.pop("config_feat"), "config_feat", "missing"),
        (
            lambda a: a.__setitem__("node_feat", a["node_feat"][:, :139]),
            "node_feat",
            "shape",
        ),
        (lambda a: a["node_feat"].__setitem__((0, 0), np.nan), "node_feat", "NaN"),
        (
            lambda a: a["edge_index"].__setitem__((0, 0), 10_000),
            "edge_index",
            "[0, 30]",
        ),
        (
            lambda a: a.__setitem__("node_opcode", a["node_opcode"][:-1]),
            "node_opcode",
            "31",
        ),
        (
            lambda a: a.__setitem__("config_runtime", a["config_runtime"][:5]),
            "config_runtime",
            "579 configs",
        ),
        (
            lambda a: a.__setitem__("config_feat", a["config_feat"][:0]),
            "config_feat",
            "no configs",
        ),
        (
            lambda a: a["config_runtime_normalizers"].__setitem__(0, 0),
            "config_runtime_normalizers",
            "> 0",
        ),
        (lambda a: a["config_runtime"].__setitem__(3, 0), "config_runtime", "all > 0"),
    ],
)
def test_bad_files_name_file_key_and_problem(
    shared_data: Path, tmp_path: Path, mutate, key: str, problem: str
) -> None:
    arrays = _real_tile_arrays(shared_data)
    mutate(arrays)
    path = _write(tmp_path, arrays)
    with pytest.raises(GraphFormatError) as info:
        load_npz(path)
    assert info.value.key == key
    assert problem in info.value.problem
    assert str(path) in str(info.value)


def test_pickled_npz_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pickle.npz"
    np.savez(path, node_feat=np.array([{"x": 1}], dtype=object))
    with pytest.raises(GraphFormatError) as info:
        load_npz(path)
    assert info.value.key == "file" and "pickle" in info.value.problem.lower()


def test_not_an_npz_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.npz"
    path.write_bytes(b"not a zip")
    with pytest.raises(GraphFormatError, match="cannot read npz"):
        load_npz(path)


def test_layout_validation_cases() -> None:
    feat = np.zeros((4, 140), np.float32)
    ops = np.array([63, 63, 26, 75])
    edges = np.array([[2, 0], [2, 1], [3, 2]])
    g = make_graph(feat, ops, edges, node_config_ids=[2, 3])
    assert g.num_configurable == 2 and g.node_opcode.dtype == np.uint8
    with pytest.raises(GraphFormatError, match="strictly increasing") as info:
        make_graph(feat, ops, edges, node_config_ids=[3, 2])
    assert info.value.key == "node_config_ids"
    with pytest.raises(GraphFormatError, match=r"\[0, 3\]"):
        make_graph(feat, ops, edges, node_config_ids=[2, 4])
    with pytest.raises(GraphFormatError, match=r"\[0, 120\]"):
        make_graph(feat, [63, 63, 26, 121], edges)
    with pytest.raises(GraphFormatError, match="expected integers"):
        make_graph(feat, [63, 63, 26.5, 75], edges)
    with pytest.raises(GraphFormatError, match="rectangular"):
        make_graph([[0.0] * 140, [0.0]], ops[:2], [])
    with pytest.raises(GraphFormatError, match=r"\[\?,2,18\]") as info:
        make_configs(np.zeros((3, 2, 17)), g)
    assert info.value.key == "node_config_feat"
    assert make_configs(np.full((3, 2, 18), -1, np.int8), g).dtype == np.float32


def test_graph_without_edges_is_valid() -> None:
    g = make_graph(np.zeros((1, 140)), [63], np.zeros((0, 2)))
    assert g.num_edges == 0 and g.edge_index.shape == (0, 2)
    g = make_graph(np.zeros((1, 140)), [63], [])
    assert g.edge_index.shape == (0, 2)


def test_npz_roundtrip_through_bytes(shared_data: Path) -> None:
    # The service receives npz bodies as bytes; the same validation must apply.
    arrays = _real_tile_arrays(shared_data)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    with np.load(io.BytesIO(buf.getvalue()), allow_pickle=False) as d:
        g = make_graph(d["node_feat"], d["node_opcode"], d["edge_index"])
    assert g.num_nodes == 31


def test_file_collection_and_file_graph_name_an_unreadable_file(tmp_path: Path) -> None:
    from xla_costmodel.tpugraphs.reader import file_collection, file_graph

    path = tmp_path / "broken.npz"
    path.write_bytes(b"not a zip")
    for read in (file_collection, file_graph):
        with pytest.raises(GraphFormatError, match="cannot read npz") as info:
            read(path)
        assert str(path) in str(info.value)


def test_file_graph_is_the_loaded_graphs_id(shared_data: Path) -> None:
    from xla_costmodel.tpugraphs.graph_id import graph_id
    from xla_costmodel.tpugraphs.reader import file_graph

    for rel in (FUSION, "npz/layout/xla/default/valid/unet_3d.4x4.bf16.npz"):
        g = load_npz(shared_data / rel).graph
        gid = graph_id(g.node_feat, g.node_opcode, g.edge_index, g.node_config_ids)
        assert file_graph(shared_data / rel) == (gid, True)
