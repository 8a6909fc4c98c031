"""Graph inputs in every accepted form hash to the service's canonical id."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
import pytest

from xla_costmodel.clients import InvalidRequest, prepare_graph
from xla_costmodel.clients.payloads import config_array, configs_npz, savez_bytes
from xla_costmodel.clients.raw_configs import configs_per_node
from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.arrays import Sample
from xla_costmodel.tpugraphs.collections import LAYOUT, TILE, XLA_CPU, get
from xla_costmodel.tpugraphs.graph_id import graph_id


def file_id(path: Path) -> str:
    with np.load(path) as d:
        ids = d["node_config_ids"] if "node_config_ids" in d.files else None
        return graph_id(d["node_feat"], d["node_opcode"], d["edge_index"], ids)


@pytest.mark.parametrize("which", ["tile", "layout"])
def test_every_graph_form_gives_the_same_id(
    which: str,
    tile_path: Path,
    layout_path: Path,
    tile_sample: Sample,
    layout_sample: Sample,
) -> None:
    path, sample = (
        (tile_path, tile_sample) if which == "tile" else (layout_path, layout_sample)
    )
    expected = file_id(path)
    with np.load(path) as npz:
        forms = [
            path,
            str(path),
            sample,
            sample.graph,
            npz,
            {k: npz[k] for k in npz.files},
        ]
        ids = {prepare_graph(form).graph_id for form in forms}
    assert ids == {expected}
    prepared = prepare_graph(path)
    assert prepare_graph(prepared) is prepared
    assert (prepared.graph.node_config_ids is not None) == get(which).per_node


def test_lists_and_other_int_widths_are_canonicalised(tile_sample: Sample) -> None:
    g = tile_sample.graph
    as_lists = {
        "node_feat": g.node_feat.tolist(),
        "node_opcode": g.node_opcode.astype(np.int32).tolist(),
        "edge_index": g.edge_index.astype(np.int32),
    }
    assert prepare_graph(as_lists).graph_id == prepare_graph(g).graph_id


def test_upload_body_round_trips(layout_sample: Sample) -> None:
    prepared = prepare_graph(layout_sample)
    with np.load(io.BytesIO(prepared.npz_bytes)) as data:
        assert sorted(data.files) == [
            "edge_index",
            "node_config_ids",
            "node_feat",
            "node_opcode",
        ]
        assert prepare_graph(data).graph_id == prepared.graph_id


def test_config_wire_dtypes(tile_sample: Sample, layout_sample: Sample) -> None:
    layout = prepare_graph(layout_sample)
    rows = config_array(layout_sample.configs[:3], layout, LAYOUT)
    with np.load(io.BytesIO(configs_npz(rows, layout, LAYOUT))) as d:
        assert d["node_config_feat"].dtype == np.int8
    odd = rows.copy()
    odd[0, 0, 0] = 0.5  # not a small int: keep float32 rather than corrupt it
    with np.load(io.BytesIO(configs_npz(odd, layout, LAYOUT))) as d:
        assert (
            d["node_config_feat"].dtype == np.float32
            and d["node_config_feat"][0, 0, 0] == 0.5
        )
    tile = prepare_graph(tile_sample)
    with np.load(
        io.BytesIO(
            configs_npz(config_array(tile_sample.configs, tile, TILE), tile, TILE)
        )
    ) as d:
        assert d["config_feat"].dtype == np.float32


def test_configs_are_built_for_the_models_collection(tile_sample: Sample) -> None:
    """A graph without configurable nodes takes the rows of the model's collection
    (tile or xla_cpu), named by the model, not told by the configs' width or form."""
    graph = prepare_graph(tile_sample.graph)
    rows = config_array(xla_cpu2.sample(3, 0), graph, XLA_CPU)
    assert rows.shape == (3, xla_cpu2.WIDTH) and configs_per_node(rows) is False
    # An older client's xla_cpu/1 rows are the same configs at today's width.
    older = config_array(xla_cpu.sample(3, 0), graph, XLA_CPU)
    np.testing.assert_array_equal(older, xla_cpu2.upgrade_v1_rows(xla_cpu.sample(3, 0)))
    with np.load(io.BytesIO(configs_npz(rows, graph, XLA_CPU))) as d:
        assert d["config_feat"].dtype == np.int8  # 0/1 bits
    with pytest.raises(InvalidRequest) as info:  # xla_cpu rows for a tile model
        config_array(rows, graph, TILE)
    assert info.value.field == "config_feat"
    raw = [{}, {xla_cpu.SCHEDULER_KEY: "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}]
    encoded = config_array(raw, graph, XLA_CPU)
    np.testing.assert_array_equal(encoded[0], xla_cpu2.default_row())
    assert xla_cpu2.to_options(encoded[1]).flat() == raw[1]
    with pytest.raises(InvalidRequest):  # not tile sizes
        config_array(raw, graph, TILE)
    with pytest.raises(InvalidRequest) as info:
        config_array([{xla_cpu.SCHEDULER_KEY: "FAST"}], graph, XLA_CPU)
    assert info.value.field == "configs[0]" and "unknown scheduler" in str(info.value)
    with pytest.raises(InvalidRequest) as info:  # a tile graph for a layout model
        config_array(rows, graph, LAYOUT)
    assert info.value.field == "node_config_ids"


def test_bad_inputs_name_the_field(tmp_path: Path, tile_sample: Sample) -> None:
    with pytest.raises(InvalidRequest) as info:
        prepare_graph(
            {"node_feat": np.zeros((2, 3)), "node_opcode": [1, 2], "edge_index": []}
        )
    assert info.value.field == "node_feat"
    with pytest.raises(InvalidRequest) as info:
        prepare_graph({"node_feat": np.zeros((2, 140))})
    assert info.value.field == "node_opcode"
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(InvalidRequest, match="cannot read npz"):
        prepare_graph(bad)
    with pytest.raises(InvalidRequest) as info:
        config_array(np.full((2, 24), np.nan), prepare_graph(tile_sample), TILE)
    assert info.value.field == "config_feat"


def test_layout_configs_go_as_int8_only_when_lossless(layout_sample: Sample) -> None:
    layout = prepare_graph(layout_sample)
    rows = config_array(layout_sample.configs[:4], layout, LAYOUT)
    for value in (128.0, -129.0, 300.0, 1e10, -0.5, 2.5, np.nan, np.inf):
        odd = rows.copy()
        odd[1, 2, 3] = value
        with np.load(io.BytesIO(configs_npz(odd, layout, LAYOUT))) as d:
            sent = d["node_config_feat"]
        assert sent.dtype == np.float32
        np.testing.assert_array_equal(sent, odd)
    edges = rows.copy()
    edges[0, 0, :2] = (-128.0, 127.0)
    with np.load(io.BytesIO(configs_npz(edges, layout, LAYOUT))) as d:
        assert d["node_config_feat"].dtype == np.int8
        assert np.array_equal(d["node_config_feat"], edges)


def test_savez_bytes_is_what_np_load_reads(layout_sample: Sample) -> None:
    g = layout_sample.graph
    arrays = {
        "node_feat": g.node_feat,
        "node_config_ids": g.node_config_ids,
        "fortran": np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4)),
        "strided": np.arange(10, dtype=">i8")[::3],
        "empty": np.zeros((0, 18), np.int8),
        "scalar": np.asarray(3.5, np.float32),
    }
    reference = io.BytesIO()
    np.savez(reference, **arrays)  # type: ignore[arg-type]
    reference.seek(0)
    body = savez_bytes(arrays)
    with np.load(io.BytesIO(body)) as ours, np.load(reference) as theirs:
        assert ours.files == theirs.files == list(arrays)
        for key in arrays:
            assert ours[key].dtype == theirs[key].dtype
            assert ours[key].shape == theirs[key].shape
            np.testing.assert_array_equal(ours[key], theirs[key])


def test_graph_id_hashes_the_documented_bytes_of_any_layout() -> None:
    feat = np.arange(2 * 140 * 2, dtype=np.float64).reshape(2, 280)[:, ::2]
    ops = np.array([63, 2], ">i4")
    edges = np.asfortranarray(np.array([[1, 0], [0, 1]], np.int32))
    h = hashlib.sha256(b"costmodel-graph-v1\n")
    h.update(b"node_feat\n<f4\n2,140\n" + feat.astype("<f4").tobytes())
    h.update(b"node_opcode\n|u1\n2\n" + ops.astype("|u1").tobytes())
    h.update(b"edge_index\n<i8\n2,2\n" + edges.astype("<i8").tobytes(order="C"))
    assert graph_id(feat, ops, edges) == h.hexdigest()
