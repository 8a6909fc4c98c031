"""The collection registry: lookups, file recognition, each collection's declared
properties, and xla_cpu files through the reader."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, get_args

import numpy as np
import pytest

from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.arrays import make_configs, make_graph
from xla_costmodel.tpugraphs.collections import (
    COLLECTIONS,
    LAYOUT,
    TILE,
    XLA_CPU,
    OlderSpec,
    UnknownCollection,
    config_keys,
    get,
    infer,
)
from xla_costmodel.tpugraphs.errors import GraphFormatError
from xla_costmodel.tpugraphs.metrics import LAYOUT_KEYS, TILE_KEYS
from xla_costmodel.tpugraphs.reader import file_collection, iter_samples, load_npz
from xla_costmodel.tpugraphs.spec import (
    COLLECTION_NAMES,
    CONFIG_SPEC_KEY,
    LAYOUT_CONFIG_DIM,
    TILE_CONFIG_DIM,
    XLA_CPU_KEYS,
    Collection,
)


def xla_cpu_arrays(
    num_configs: int = 6, seed: int = 0, spec: Any = xla_cpu2
) -> dict[str, Any]:
    """A small xla_cpu file as the collector writes one (``xla_cpu/2``; an older
    release's with ``spec=xla_cpu``): default config in row 0, its runtime the
    normaliser, ``config_spec`` a unicode scalar."""
    rng = np.random.default_rng(seed)
    n = 5
    runtimes = rng.integers(1_000, 2_000, num_configs).astype(np.int64)
    return {
        "node_feat": rng.random((n, 140)).astype(np.float32),
        "node_opcode": np.array([63, 63, 2, 34, 75], np.uint8),
        "edge_index": np.array([[2, 0], [2, 1], [3, 2], [4, 3]], np.int64),
        "config_feat": spec.sample(num_configs, seed),
        "config_runtime": runtimes,
        "config_runtime_normalizers": np.full(num_configs, runtimes[0], np.int64),
        CONFIG_SPEC_KEY: np.array(spec.SPEC),
    }


def test_the_registry_declares_exactly_the_collection_literal() -> None:
    assert COLLECTION_NAMES == get_args(Collection) == ("tile", "layout", "xla_cpu")
    assert list(COLLECTIONS.values()) == [TILE, LAYOUT, XLA_CPU]
    assert all(get(name).name == name for name in COLLECTION_NAMES)


def test_an_unknown_name_is_a_clear_error() -> None:
    with pytest.raises(
        UnknownCollection, match=r"'gpu' \(known: tile, layout, xla_cpu\)"
    ):
        get("gpu")
    assert issubclass(UnknownCollection, ValueError)


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({"node_feat", "config_feat", "config_runtime_normalizers"}, "tile"),
        ({"node_feat", "node_config_feat", "node_config_ids"}, "layout"),
        ({"node_feat", "config_feat", CONFIG_SPEC_KEY}, "xla_cpu"),
        ({"node_config_feat", CONFIG_SPEC_KEY}, "xla_cpu"),  # the spec decides
        (set(), "tile"),
    ],
)
def test_infer_reads_the_keys(keys: set[str], expected: str) -> None:
    assert infer(keys).name == expected
    assert infer(dict.fromkeys(keys, 0)).name == expected


def test_declared_properties() -> None:
    table = {
        c.name: (
            c.config_key,
            c.width,
            c.per_node,
            c.normalised,
            c.default_is_normalizer,
        )
        for c in COLLECTIONS.values()
    }
    assert table == {
        "tile": ("config_feat", TILE_CONFIG_DIM, False, True, True),
        "layout": ("node_config_feat", LAYOUT_CONFIG_DIM, True, False, False),
        "xla_cpu": ("config_feat", 20, False, True, True),
    }
    assert xla_cpu2.WIDTH == 20 and xla_cpu.WIDTH == 17
    assert {20, 17}.isdisjoint((TILE_CONFIG_DIM, LAYOUT_CONFIG_DIM))
    assert TILE.metrics.keys == TILE_KEYS and LAYOUT.metrics.keys == LAYOUT_KEYS
    assert XLA_CPU.metrics.keys == (
        "kendall_tau",
        "top1_slowdown",
        "top5_slowdown",
        "top10_slowdown",
    )
    assert (TILE.config_spec, LAYOUT.config_spec, XLA_CPU.config_spec) == (
        None,
        None,
        "xla_cpu/2",
    )
    # The older spec it still reads, and the upgrade that gives the same configs.
    assert XLA_CPU.older == (OlderSpec("xla_cpu/1", 17, xla_cpu2.upgrade_v1_rows),)
    assert TILE.older == LAYOUT.older == ()
    assert XLA_CPU.config_shapes() == ((20,), (17,))
    v1 = xla_cpu.sample(4, seed=1)
    np.testing.assert_array_equal(
        XLA_CPU.upgrade(v1), np.stack([xla_cpu2.upgrade_v1(r) for r in v1])
    )
    today = xla_cpu2.sample(4, seed=1)
    assert XLA_CPU.upgrade(today) is today
    with pytest.raises(ValueError, match="no xla_cpu spec has rows of 19"):
        XLA_CPU.upgrade(np.zeros((1, 19), np.float32))
    assert XLA_CPU.default_config == tuple(xla_cpu2.default_row().tolist())
    assert XLA_CPU.file_keys == XLA_CPU_KEYS
    assert XLA_CPU.required_keys[-1] == CONFIG_SPEC_KEY
    assert [c.raw is not None for c in COLLECTIONS.values()] == [True, False, True]
    assert config_keys() == ("config_feat", "node_config_feat")
    assert [c.config_shape(3) for c in COLLECTIONS.values()] == [
        (24,),
        (3, 18),
        (20,),
    ]


def test_collections_are_named_each_with_its_folder() -> None:
    """Names, not widths, tell collections apart (two may share a width)."""
    assert [get(n).name for n in COLLECTION_NAMES] == list(COLLECTION_NAMES)
    dirs = [get(n).dataset_dir for n in COLLECTION_NAMES]
    assert len(set(dirs)) == len(dirs) and get("layout").dataset_dir.startswith(
        "layout/"
    )


def test_metrics_and_baselines_follow_the_declaration() -> None:
    scores, runtimes = [0.0, 1.0, 2.0], [3.0, 2.0, 1.0]
    got = XLA_CPU.metrics(scores, runtimes)
    assert got["kendall_tau"] == pytest.approx(-1.0)
    assert got["top1_slowdown"] == pytest.approx(2.0) and got["top5_slowdown"] == 0.0
    random = XLA_CPU.metrics.random_baseline(runtimes)
    assert set(random) == set(XLA_CPU.metrics.keys) and random["kendall_tau"] == 0.0
    default = XLA_CPU.default_baseline([0.5, 1.0, 2.0])  # targets: runtime / default
    assert math.isnan(default["kendall_tau"]) and default["top1_slowdown"] == 1.0
    assert LAYOUT.no_default_baseline()["reason"].startswith("layout npz files")
    with pytest.raises(ValueError, match="do not mark a default"):
        LAYOUT.default_baseline([1.0])


def test_selection_scores() -> None:
    slow = {
        "kendall_tau": 0.9,
        "top1_slowdown": 0.5,
        "top5_slowdown": 0.1,
        "top10_slowdown": 0.0,
    }
    assert XLA_CPU.selection_score(slow) == pytest.approx(-0.2)
    assert TILE.selection_score(
        {"top1_slowdown": 0.3, "top5_slowdown": None}
    ) == pytest.approx(-0.3)
    assert LAYOUT.selection_score({"kendall_tau": 0.4}) == 0.4
    assert LAYOUT.selection_score({"kendall_tau": None}) == -math.inf


def test_the_default_config_is_found_by_its_normaliser() -> None:
    runtimes = np.array([7, 5, 9])
    assert XLA_CPU.default_index(runtimes, np.array([9, 9, 9])) == 2
    assert TILE.default_index(runtimes, np.array([1, 1, 1])) is None
    assert LAYOUT.default_index(runtimes, None) is None


def test_xla_cpu_file_round_trips_through_the_reader(tmp_path: Path) -> None:
    arrays = xla_cpu_arrays()
    path = tmp_path / "program.npz"
    np.savez(path, **arrays)  # a unicode scalar: no pickle needed to read it back
    assert file_collection(path) == "xla_cpu"
    sample = load_npz(path)
    assert (sample.collection, sample.spec) == ("xla_cpu", XLA_CPU)
    np.testing.assert_array_equal(sample.configs, arrays["config_feat"])
    assert sample.configs.shape == (6, xla_cpu2.WIDTH)
    assert (sample.targets()[0], sample.graph.node_config_ids) == (1.0, None)
    assert XLA_CPU.default_index(sample.runtimes, sample.normalizers) == 0
    assert [s.name for s in iter_samples([tmp_path], "xla_cpu")] == [str(path)]
    assert list(iter_samples([tmp_path], "tile")) == []
    with pytest.raises(GraphFormatError, match="expected a tile file, found xla_cpu"):
        load_npz(path, "tile")


def test_an_older_releases_xla_cpu_file_reads_as_xla_cpu2_rows(
    tmp_path: Path,
) -> None:
    arrays = xla_cpu_arrays(spec=xla_cpu)
    path = tmp_path / "old.npz"
    np.savez(path, **arrays)
    sample = load_npz(path)
    assert sample.spec == XLA_CPU and sample.configs.shape == (6, xla_cpu2.WIDTH)
    want = xla_cpu2.upgrade_v1_rows(arrays["config_feat"])
    np.testing.assert_array_equal(sample.configs, want)
    assert XLA_CPU.default_index(sample.runtimes, sample.normalizers) == 0
    np.testing.assert_array_equal(sample.configs[0], XLA_CPU.default_config)


@pytest.mark.parametrize(
    ("change", "key", "problem"),
    [
        (
            {"config_feat": np.zeros((6, 24), np.float32)},
            "config_feat",
            "xla_cpu/2 rows have 20 columns, got 24",
        ),
        (  # xla_cpu/1 rows under xla_cpu/2's name: refused, not guessed
            {"config_feat": xla_cpu.sample(6, 0)},
            "config_feat",
            "xla_cpu/2 rows have 20 columns, got 17",
        ),
        ({CONFIG_SPEC_KEY: np.array("xla_cpu/3")}, CONFIG_SPEC_KEY, "unknown spec"),
        ({CONFIG_SPEC_KEY: np.array([1.0])}, CONFIG_SPEC_KEY, "unicode scalar"),
        ({"config_runtime_normalizers": None}, "config_runtime_normalizers", "missing"),
    ],
)
def test_bad_xla_cpu_files_name_the_key(
    tmp_path: Path, change: dict[str, Any], key: str, problem: str
) -> None:
    arrays = {**xla_cpu_arrays(), **change}
    path = tmp_path / "bad.npz"
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    with pytest.raises(GraphFormatError) as info:
        load_npz(path)
    assert info.value.key == key and problem in info.value.problem


def test_configs_without_a_collection_take_any_width_of_the_graph_shape() -> None:
    graph = make_graph(np.zeros((2, 140)), [63, 2], [[1, 0]])
    for width in (TILE_CONFIG_DIM, xla_cpu2.WIDTH):
        assert make_configs(np.zeros((3, width)), graph).shape == (3, width)
    # An xla_cpu/1 batch reads as its xla_cpu/2 upgrade.
    old = make_configs(xla_cpu.sample(3, seed=2), graph)
    np.testing.assert_array_equal(old, xla_cpu2.upgrade_v1_rows(xla_cpu.sample(3, 2)))
    with pytest.raises(GraphFormatError, match=r"\[\?,24\] or \[\?,20\] or \[\?,17\]"):
        make_configs(np.zeros((3, 5)), graph)
    with pytest.raises(GraphFormatError, match=r"expected shape \[\?,24\]"):
        make_configs(np.zeros((3, xla_cpu2.WIDTH)), graph, collection="tile")
