"""Config encoders/decoders: exact round trips on real files, and located errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from xla_costmodel.tpugraphs.configs import (
    NodeLayout,
    TileSizes,
    decode_layout,
    decode_tile,
    decode_tiles,
    encode_layout,
    encode_tile,
)
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.hlo import HloGraph, featurize_hlo

SHARED = Path(__file__).resolve().parents[2] / "datasets" / "tpugraphs"
TILE_FILES = sorted(
    (SHARED / "pb" / "official_testdata" / "op_tuning_data.converted").glob("*.npz")
) + sorted((SHARED / "npz" / "tile").rglob("*.npz"))
UNET_NPZ = (
    SHARED / "npz" / "layout" / "xla" / "default" / "valid" / "unet_3d.4x4.bf16.npz"
)
UNET_HLO = SHARED / "hlo" / "unet_3d.4x4.bf16.hlo.txt"


@pytest.fixture(scope="module")
def unet() -> dict[str, np.ndarray]:
    with np.load(UNET_NPZ) as data:
        return {k: data[k] for k in ("node_config_feat", "node_config_ids")}


@pytest.fixture(scope="module")
def unet_graph() -> HloGraph:
    return featurize_hlo(UNET_HLO.read_text())


# ------------------------------------------------------------------------ tile


def test_tile_files_exist() -> None:
    assert len(TILE_FILES) >= 10


@pytest.mark.parametrize("path", TILE_FILES, ids=lambda p: p.name)
def test_real_tile_configs_round_trip(path: Path) -> None:
    with np.load(path) as data:
        config_feat = data["config_feat"]
    raw = decode_tiles(config_feat)
    assert all(isinstance(t, TileSizes) for t in raw)
    encoded = encode_tile(raw)
    assert encoded.dtype == np.float32
    assert np.array_equal(encoded, config_feat)


def test_encode_tile_layout_of_the_24_values() -> None:
    row = encode_tile([TileSizes([1, 1, 16, 1], [2, 3], [])])[0]
    assert row.tolist() == [
        1,
        1,
        16,
        1,
        0,
        0,
        19,
        16,
        2,
        3,
        0,
        0,
        0,
        0,
        5,
        6,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,  # an empty list has product 0 here
    ]
    assert decode_tile(row) == TileSizes([1, 1, 16, 1], [2, 3], [])
    assert encode_tile([]).shape == (0, 24)


def test_a_tile_list_longer_than_six_encodes_but_cannot_decode() -> None:
    row = encode_tile([TileSizes([], [1, 2, 3, 4, 5, 6, 7], [])])[0]
    assert row[8:16].tolist() == [1, 2, 3, 4, 5, 6, 28, 5040]
    with pytest.raises(GraphFormatError) as err:
        decode_tile(row)
    assert err.value.key == "config_feat.output_bounds"
    assert "longer than 6" in err.value.problem


@pytest.mark.parametrize(
    ("config", "key"),
    [
        (TileSizes([0], [], []), "configs[1].kernel_bounds[0]"),
        (TileSizes([], [4, -2], []), "configs[1].output_bounds[1]"),
        (TileSizes([], [], [1.5]), "configs[1].input_bounds[0]"),  # type: ignore[list-item]
        (TileSizes([], [True], []), "configs[1].output_bounds[0]"),
        (TileSizes([], "12", []), "configs[1].output_bounds"),  # type: ignore[arg-type]
        (TileSizes([2**40] * 4, [], []), "configs[1].kernel_bounds"),  # product > f32
    ],
)
def test_bad_tile_sizes_name_the_field(config: TileSizes, key: str) -> None:
    with pytest.raises(GraphFormatError) as err:
        encode_tile([TileSizes([1], [1], []), config])
    assert err.value.key == key


@pytest.mark.parametrize(
    ("row", "key"),
    [
        ([1, 0, 3, 0, 0, 0, 4, 3] + [0] * 16, "config_feat.kernel_bounds"),
        ([2, 0, 0, 0, 0, 0, 2, 3] + [0] * 16, "config_feat.kernel_bounds"),
        ([0] * 8 + [-1, 0, 0, 0, 0, 0, -1, -1] + [0] * 8, "config_feat.output_bounds"),
        ([0.5] + [0] * 23, "config_feat"),
        ([0] * 23, "config_feat"),
    ],
)
def test_inconsistent_tile_rows_are_refused(row: list[float], key: str) -> None:
    with pytest.raises(GraphFormatError) as err:
        decode_tile(np.array(row, dtype=np.float32))
    assert err.value.key == key


# ---------------------------------------------------------------------- layout


def test_real_layout_configs_round_trip_by_node_id(unet: dict[str, np.ndarray]) -> None:
    feat, ids = unet["node_config_feat"], unet["node_config_ids"]
    raw = decode_layout(feat, ids)
    assert len(raw) == feat.shape[0]
    every_node = set(ids.tolist())
    assert all(config.keys() == every_node for config in raw)
    assert np.array_equal(encode_layout(raw, ids), feat)


def test_real_layout_configs_round_trip_by_name_with_rank_checks(
    unet: dict[str, np.ndarray], unet_graph: HloGraph
) -> None:
    raw = decode_layout(unet["node_config_feat"], unet["node_config_ids"])
    names = unet_graph.node_names
    # Configs may leave "compiler chooses" nodes out entirely.
    named = [
        {
            names[node]: layout
            for node, layout in config.items()
            if layout != NodeLayout()
        }
        for config in raw
    ]
    encoded = encode_layout(
        named,
        unet_graph.node_config_ids,  # type: ignore[arg-type]
        names,
        unet_graph.config_tensor_ranks,
    )
    assert np.array_equal(encoded, unet["node_config_feat"])


def test_decoded_layout_raw_form(
    unet: dict[str, np.ndarray], unet_graph: HloGraph
) -> None:
    config = decode_layout(unet["node_config_feat"][:1], unet["node_config_ids"])[0]
    conv = unet_graph.node_names.index("convolution.1043")
    assert config[conv] == NodeLayout(output=[4, 0], input=[0, 4], kernel=[4, 3])
    assert config[int(unet["node_config_ids"][0])] == NodeLayout(None, None, None)


def _encode_one(graph: HloGraph, config: dict[Any, Any]) -> np.ndarray:
    return encode_layout(
        [{}, config],
        graph.node_config_ids,  # type: ignore[arg-type]
        graph.node_names,
        graph.config_tensor_ranks,
    )


def test_partial_layouts_pad_with_minus_one(unet_graph: HloGraph) -> None:
    out = _encode_one(unet_graph, {"convolution.1043": NodeLayout(output=[4, 0])})
    k = [unet_graph.node_names[i] for i in unet_graph.node_config_ids].index(  # type: ignore[union-attr]
        "convolution.1043"
    )
    assert out[1, k].tolist() == [4, 0] + [-1] * 16
    assert (np.delete(out[1], k, axis=0) == -1).all() and (out[0] == -1).all()


@pytest.mark.parametrize(
    ("config", "key", "fragment"),
    [
        ({"nope.1": NodeLayout()}, "configs[1].layouts.nope.1", "no instruction"),
        (
            {"add.1522": NodeLayout()},
            "configs[1].layouts.add.1522",
            "not a configurable",
        ),
        (
            {"convolution.1043": NodeLayout(output=[5])},
            "configs[1].layouts.convolution.1043.output",
            "out of range",
        ),
        (
            {"convolution.1043": NodeLayout(input=[0, 1, 2, 3, 4, 0, 1])},
            "configs[1].layouts.convolution.1043.input",
            "at most 6",
        ),
        (
            {"convolution.1043": NodeLayout(kernel=[1, 1])},
            "configs[1].layouts.convolution.1043.kernel",
            "distinct",
        ),
        (
            {"convolution.1043": NodeLayout(output=[-1])},
            "configs[1].layouts.convolution.1043.output",
            ">= 0",
        ),
        (
            {"convolution.1043": NodeLayout(output=[0.0])},  # type: ignore[list-item]
            "configs[1].layouts.convolution.1043.output",
            "integers",
        ),
        (
            {"reshape.4": NodeLayout(kernel=[0])},
            "configs[1].layouts.reshape.4.kernel",
            "no such tensor",
        ),
        (
            {"reshape.58": NodeLayout(output=[0])},
            "configs[1].layouts.reshape.58.output",
            "rank 0",
        ),
        (
            {"convolution.1043": NodeLayout(), 660: NodeLayout()},  # 660: the same node
            "configs[1].layouts.660",
            "twice",
        ),
        (
            {"convolution.1043": [4, 0]},
            "configs[1].layouts.convolution.1043",
            "NodeLayout",
        ),
        ({3.0: NodeLayout()}, "configs[1].layouts.3.0", "name or a node id"),
    ],
)
def test_bad_layouts_name_the_field_path(
    unet_graph: HloGraph, config: dict[Any, Any], key: str, fragment: str
) -> None:
    with pytest.raises(GraphFormatError) as err:
        _encode_one(unet_graph, config)
    assert err.value.key == key
    assert fragment in err.value.problem


def test_names_need_node_names(unet: dict[str, np.ndarray]) -> None:
    with pytest.raises(GraphFormatError) as err:
        encode_layout([{"convolution.1043": NodeLayout()}], unet["node_config_ids"])
    assert err.value.key == "configs[0].layouts.convolution.1043"


@pytest.mark.parametrize(
    ("tensor", "key"),
    [
        ([0, -1, 1, -1, -1, -1], "node_config_feat[0,1].input"),
        ([2, 2, -1, -1, -1, -1], "node_config_feat[0,1].input"),
        ([-2, -1, -1, -1, -1, -1], "node_config_feat[0,1].input"),
    ],
)
def test_malformed_node_config_feat_is_located(tensor: list[int], key: str) -> None:
    feat = np.full((1, 2, 18), -1, dtype=np.float32)
    feat[0, 1, 6:12] = tensor
    with pytest.raises(GraphFormatError) as err:
        decode_layout(feat, [3, 7])
    assert err.value.key == key


def test_node_config_feat_shape_must_match_ids() -> None:
    with pytest.raises(GraphFormatError) as err:
        decode_layout(np.full((2, 3, 18), -1), [1, 2])
    assert err.value.key == "node_config_feat"
    assert "[?,2,18]" in err.value.problem
