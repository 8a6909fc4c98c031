"""Raw config JSON -> TileSizes / NodeLayout: shapes accepted, and errors keyed by path."""

from __future__ import annotations

import pytest

from xla_costmodel.tpugraphs.config_json import (
    is_tile_json,
    layout_from_json,
    node_layout_from_json,
    tile_from_json,
)
from xla_costmodel.tpugraphs.configs import NodeLayout, TileSizes
from xla_costmodel.tpugraphs.errors import GraphFormatError


def test_tile_missing_lists_are_empty() -> None:
    t = tile_from_json({"output_bounds": [4, 2]}, "raw_configs[0]")
    assert t == TileSizes(kernel_bounds=[], output_bounds=[4, 2], input_bounds=[])
    same = TileSizes(kernel_bounds=[1], output_bounds=[2], input_bounds=[])
    assert tile_from_json(same, "x") is same


def test_layout_keeps_node_keys_and_nulls() -> None:
    cfg = layout_from_json(
        {"dot.9": {"output": [1, 0], "kernel": None}, "12": {}}, "raw_configs[2]"
    )
    assert set(cfg) == {"dot.9", "12"}
    assert cfg["dot.9"].output == [1, 0] and cfg["dot.9"].kernel is None
    assert cfg["12"] == node_layout_from_json({}, "p")


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"output_bound": [1]}, "raw_configs[3]"),  # misspelt field
        ([1, 2, 3], "raw_configs[3]"),  # not an object
    ],
)
def test_tile_errors_name_the_config(value: object, path: str) -> None:
    with pytest.raises(GraphFormatError) as info:
        tile_from_json(value, "raw_configs[3]")
    assert info.value.key.startswith(path)


def test_layout_errors_name_the_node() -> None:
    with pytest.raises(GraphFormatError) as info:
        layout_from_json({"conv.1": {"outputs": [0]}}, "raw_configs[1]")
    assert info.value.key.startswith("raw_configs[1].conv.1")
    with pytest.raises(GraphFormatError) as info:
        layout_from_json([{"output": [0]}], "raw_configs[0]")
    assert info.value.key == "raw_configs[0]"


def test_tile_or_layout_detection() -> None:
    assert is_tile_json({"kernel_bounds": [1]})
    assert is_tile_json(TileSizes(kernel_bounds=[], output_bounds=[1], input_bounds=[]))
    assert not is_tile_json({"dot.9": {"output": [0]}})
    assert not is_tile_json({})  # an empty layout config: the compiler chooses all
    assert isinstance(node_layout_from_json(NodeLayout(), "p"), NodeLayout)
