"""Raw config JSON -> TileSizes / NodeLayout / xla_cpu/2 rows: shapes accepted, and
errors keyed by path."""

from __future__ import annotations

import numpy as np
import pytest

from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.config_json import (
    XLA_CPU_JSON_SCHEMA,
    is_tile_json,
    is_xla_cpu_json,
    layout_from_json,
    node_layout_from_json,
    tile_from_json,
    xla_cpu_rows_from_json,
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


# -- xla_cpu: xla_cpu/2's flat options ---------------------------------------------

THRESHOLD = f"{xla_cpu2.THRESHOLD_KEY}=65536"


def test_xla_cpu_options_with_the_map_become_xla_cpu2_rows() -> None:
    raw = [
        {},
        {xla_cpu2.EXTRA_KEY: THRESHOLD},
        {xla_cpu.SCHEDULER_KEY: "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"},
    ]
    rows = xla_cpu_rows_from_json(raw, "raw_configs")
    assert rows.shape == (3, xla_cpu2.WIDTH) and rows.dtype == np.float32
    np.testing.assert_array_equal(rows[0], xla_cpu2.default_row())
    assert xla_cpu2.to_options(rows[1]).flat() == raw[1]
    assert xla_cpu2.to_options(rows[2]).flat() == raw[2]
    # What a decision or GET /v1/best carries reads back as the same row.
    for row in xla_cpu2.sample(16, seed=4):
        again = xla_cpu_rows_from_json([xla_cpu2.to_options(row).flat()], "c")
        np.testing.assert_array_equal(again[0], row)
    assert all(is_xla_cpu_json(v) for v in raw[1:]) and not is_xla_cpu_json({})
    assert not is_tile_json(raw[1])


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({xla_cpu2.EXTRA_KEY: "xla_cpu_made_up_option_for_tests=1"}, "keys outside"),
        ({xla_cpu2.EXTRA_KEY: f"{xla_cpu2.THRESHOLD_KEY}=7"}, "is not one of"),
        ({xla_cpu2.EXTRA_KEY: "no pairs"}, "k=v,k=v"),
        ({xla_cpu2.EXTRA_KEY: 65536}, "k=v,k=v"),
        ({xla_cpu2.EXTRA_KEY: f"{THRESHOLD}=1"}, "no ',' or '='"),
        ({"xla_made_up_option": True}, "options outside"),
        ([THRESHOLD], "expected an object"),
    ],
)
def test_bad_xla_cpu_options_name_the_config(value: object, problem: str) -> None:
    with pytest.raises(GraphFormatError) as info:
        xla_cpu_rows_from_json([{}, value], "raw_configs")
    assert info.value.key == "raw_configs[1]" and problem in info.value.problem


def test_the_xla_cpu_schema_describes_the_map() -> None:
    props = XLA_CPU_JSON_SCHEMA["properties"]
    assert set(props) == {*xla_cpu.KNOWN_KEYS, xla_cpu2.EXTRA_KEY}
    assert props[xla_cpu2.EXTRA_KEY]["type"] == "string"
    assert xla_cpu2.THRESHOLD_KEY in props[xla_cpu2.EXTRA_KEY]["description"]
    assert xla_cpu2.SPEC in XLA_CPU_JSON_SCHEMA["description"]
