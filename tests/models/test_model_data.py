"""Training-data preparation: de-duplication, targets, statistics, hold-out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from modelkit import FUSION_191, TILE_KERNELS, UNET_TRAIN

from xla_costmodel.models.data import (
    SIGNED_NODE_COLUMNS,
    ExampleStore,
    dedup_configs,
    feature_log,
    feature_stats,
    holdout_split,
    make_example,
)
from xla_costmodel.models.synthetic import (
    make_layout_arrays,
    make_tile_arrays,
    write_npz,
)
from xla_costmodel.tpugraphs.arrays import sample_from_arrays
from xla_costmodel.tpugraphs.reader import load_npz


def test_dedup_merges_identical_rows_with_the_mean_runtime() -> None:
    configs = np.array([[1, 2], [3, 4], [1, 2], [5, 6], [3, 4]], np.float32)
    targets = np.array([10.0, 20.0, 30.0, 40.0, 50.0])
    got_configs, got_targets = dedup_configs(configs, targets)
    np.testing.assert_array_equal(
        got_configs, [[1, 2], [3, 4], [5, 6]]
    )  # first-seen order
    np.testing.assert_allclose(got_targets, [20.0, 35.0, 40.0])


def test_dedup_compares_whole_layout_config_matrices() -> None:
    configs = np.zeros((3, 2, 18), np.float32)
    configs[1, 1, 5] = 1.0  # differs from config 0 in the second node only
    got, targets = dedup_configs(configs, np.array([1.0, 2.0, 3.0]))
    assert got.shape == (2, 2, 18)
    np.testing.assert_allclose(targets, [2.0, 2.0])


def test_tile_targets_are_runtime_over_normaliser(shared_data: Path) -> None:
    sample = load_npz(shared_data / FUSION_191)
    ex = make_example(sample)
    assert ex.raw_configs == 579 and ex.configs.shape == (579, 24)
    want = sample.runtimes / sample.normalizers
    np.testing.assert_allclose(np.sort(ex.targets), np.sort(want))
    assert ex.targets.min() == pytest.approx(0.906, abs=1e-3)


def test_real_layout_graph_is_deduplicated(shared_data: Path) -> None:
    ex = make_example(load_npz(shared_data / UNET_TRAIN))
    assert (ex.raw_configs, ex.configs.shape[0]) == (1159, 681)
    assert ex.rankable


def test_graphs_with_one_distinct_config_are_not_rankable(shared_data: Path) -> None:
    kernels = sorted((shared_data / TILE_KERNELS).glob("reshape.*.npz"))
    assert kernels and not any(make_example(load_npz(k)).rankable for k in kernels)


def test_max_configs_keeps_the_fastest() -> None:
    sample = sample_from_arrays(make_tile_arrays(num_configs=300, seed=3), "x")
    full = make_example(sample)
    capped = make_example(sample, max_configs=20, seed=1)
    assert capped.configs.shape[0] == 20
    assert capped.targets.min() == full.targets.min()


def test_stats_mask_constant_columns_and_match_the_transform(tmp_path: Path) -> None:
    from xla_costmodel.models.synthetic import write_npz

    paths = [
        write_npz(tmp_path / f"g{i}.npz", make_tile_arrays(seed=i)) for i in range(3)
    ]
    examples = list(ExampleStore(paths, "tile"))
    stats = feature_stats(examples, "tile")
    assert stats.graphs == 3
    assert stats.node_std[1] == 0.0  # element_size_in_bits is always 0
    assert stats.config_std[0] == 0.0  # kernel_bounds unused in the synthetic kernels
    nodes = np.concatenate(
        [feature_log(ex.graph.node_feat, SIGNED_NODE_COLUMNS) for ex in examples]
    )
    np.testing.assert_allclose(stats.node_mean, nodes.mean(0), atol=1e-6)


def test_example_store_streams_when_over_budget(tmp_path: Path) -> None:
    from xla_costmodel.models.synthetic import write_npz

    paths = [
        write_npz(tmp_path / f"g{i}.npz", make_tile_arrays(seed=i)) for i in range(3)
    ]
    store = ExampleStore(paths, "tile", cache_bytes=1)
    assert (
        [ex.name for ex in store]
        == [ex.name for ex in store]
        == [str(p) for p in paths]
    )
    assert store._cache is None


def test_holdout_is_deterministic_and_by_file(tmp_path: Path) -> None:
    files = [
        write_npz(tmp_path / f"k{i}.npz", make_tile_arrays(num_nodes=8, seed=i))
        for i in range(10)
    ]
    train, valid = holdout_split(files)
    assert len(valid) == 2 and not set(train) & set(valid)
    assert set(holdout_split(list(reversed(files)))[1]) == set(valid)
    assert holdout_split(files[:1]) == (files[:1], [])


def test_holdout_keeps_every_copy_of_a_graph_on_one_side(tmp_path: Path) -> None:
    """A layout program under default/ and random/ (same file name, same graph, other
    configs) is one graph: validated or trained on whole. Test files never validate."""
    files = []
    for i in range(6):
        arrays = make_layout_arrays(num_nodes=20, num_configs=10, seed=i)
        for search in ("default", "random"):
            files.append(write_npz(tmp_path / search / f"g{i}.npz", arrays))
    unlabelled = make_layout_arrays(num_nodes=20, num_configs=10, seed=99)
    unlabelled["config_runtime"] = np.zeros_like(unlabelled["config_runtime"])
    files.append(write_npz(tmp_path / "test" / "aaa.npz", unlabelled))
    train, valid = holdout_split(files)
    names = {p.name for p in valid}
    assert len(names) == 2 and len(valid) == 4  # 20% of 6 graphs, both copies each
    assert not names & {p.name for p in train}
    assert tmp_path / "test" / "aaa.npz" in train


def test_holdout_needs_two_labelled_graphs(tmp_path: Path) -> None:
    arrays = make_tile_arrays(num_nodes=8, seed=0)
    same = [write_npz(tmp_path / f"copy{i}.npz", arrays) for i in range(3)]
    assert holdout_split(same) == (same, [])


def test_collection_files_names_an_unreadable_file(tmp_path: Path) -> None:
    from xla_costmodel.models.data import collection_files
    from xla_costmodel.tpugraphs.errors import GraphFormatError

    (tmp_path / "broken.npz").write_bytes(b"")
    with pytest.raises(GraphFormatError, match=r"broken\.npz"):
        collection_files([tmp_path], "tile")
