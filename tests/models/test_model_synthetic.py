"""Synthetic files: the exact real format, any size, fast, numpy only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xla_costmodel.models.synthetic import (
    MAKERS,
    make_layout_arrays,
    make_tile_arrays,
    make_xla_cpu_arrays,
    write_npz,
)
from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.reader import load_npz
from xla_costmodel.tpugraphs.spec import (
    COLLECTION_NAMES,
    CONFIG_SPEC_KEY,
    LAYOUT_KEYS,
    NUM_OPCODES,
    TILE_KEYS,
    XLA_CPU_KEYS,
)

DTYPES = {
    "node_feat": np.float32,
    "node_opcode": np.uint8,
    "edge_index": np.int64,
    "config_feat": np.float32,
    "config_runtime": np.int64,
    "config_runtime_normalizers": np.int64,
    "node_config_feat": np.float32,
    "node_config_ids": np.int64,
    "node_splits": np.int64,
}


def check_format(arrays: dict[str, np.ndarray], keys: tuple[str, ...]) -> None:
    assert tuple(arrays) == keys
    for key, value in arrays.items():
        assert value.dtype == DTYPES[key], key
    edges = arrays["edge_index"]
    assert (edges[:, 0] > edges[:, 1]).all()
    order = np.lexsort((edges[:, 1], edges[:, 0]))
    assert (order == np.arange(len(edges))).all()
    assert len(np.unique(edges, axis=0)) == len(edges)
    assert arrays["node_opcode"].max() < NUM_OPCODES
    assert (arrays["config_runtime"] > 1).all()


def test_files_round_trip_through_the_reader_in_the_real_format(tmp_path: Path) -> None:
    for keys, arrays in (
        (TILE_KEYS, make_tile_arrays(seed=1)),
        (LAYOUT_KEYS, make_layout_arrays(seed=1)),
    ):
        check_format(arrays, keys)
        path = write_npz(tmp_path / f"{len(keys)}.npz", arrays)
        with np.load(path) as data:
            assert tuple(data.files) == keys
        sample = load_npz(path)
        assert sample.labelled
    splits = make_layout_arrays()["node_splits"]
    assert splits.ndim == 2 and splits[0, 0] == 0 and splits[0, -1] == 60


def test_tile_normaliser_is_the_default_configs_runtime() -> None:
    arrays = make_tile_arrays(seed=2)
    assert (arrays["config_runtime_normalizers"] == arrays["config_runtime"][0]).all()


def test_xla_cpu_files_name_their_spec_and_put_the_default_first(
    tmp_path: Path,
) -> None:
    arrays = make_xla_cpu_arrays(seed=3)
    check_format(
        {k: v for k, v in arrays.items() if k != CONFIG_SPEC_KEY}, XLA_CPU_KEYS[:-1]
    )
    assert tuple(arrays) == XLA_CPU_KEYS and str(arrays[CONFIG_SPEC_KEY]) == "xla_cpu/2"
    np.testing.assert_array_equal(arrays["config_feat"][0], xla_cpu2.default_row())
    assert (arrays["config_runtime_normalizers"] == arrays["config_runtime"][0]).all()
    assert load_npz(write_npz(tmp_path / "x.npz", arrays)).collection == "xla_cpu"
    # a file of the older spec is read with its rows upgraded; a spec/width mismatch
    # is refused, never read as the other spec
    older = {
        **arrays,
        CONFIG_SPEC_KEY: np.array("xla_cpu/1"),
        "config_feat": arrays["config_feat"][:, : xla_cpu.WIDTH],
    }
    v1 = load_npz(write_npz(tmp_path / "v1.npz", older))
    np.testing.assert_array_equal(
        v1.configs, xla_cpu2.upgrade_v1_rows(older["config_feat"])
    )
    with pytest.raises(GraphFormatError, match="xla_cpu/2 rows have 20 columns"):
        load_npz(
            write_npz(
                tmp_path / "bad.npz", {**older, CONFIG_SPEC_KEY: np.array("xla_cpu/2")}
            )
        )
    # every collection can be synthesised
    assert {s.name for s in MAKERS} == set(COLLECTION_NAMES)


def test_large_graphs_are_well_formed() -> None:
    """Size only; speed belongs in benchmarks, not in a wall-clock assert."""
    tile = make_tile_arrays(num_nodes=50_000, num_configs=100_000, seed=0)
    layout = make_layout_arrays(num_nodes=50_000, num_configs=50, num_configurable=800)
    check_format(tile, TILE_KEYS)
    assert layout["node_config_feat"].shape == (50, 800, 18)


def test_same_seed_same_arrays() -> None:
    a, b = make_layout_arrays(seed=5), make_layout_arrays(seed=5)
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_synthetic_and_cli_modules_do_not_import_torch() -> None:
    code = "import sys, xla_costmodel.models.synthetic, xla_costmodel.models.cli; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
