"""A model trained on planted-signal data must clearly beat random on held-out graphs,
so a broken network, loss or training loop cannot pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from modelkit import tiny_config

from xla_costmodel.models.data import ExampleStore
from xla_costmodel.models.synthetic import write_tree
from xla_costmodel.models.train import fit
from xla_costmodel.tpugraphs.collections import get
from xla_costmodel.tpugraphs.metrics import mean_metrics

SIZES = {
    "tile": {"num_nodes": 20, "num_configs": 80},
    "layout": {"num_nodes": 40, "num_configs": 80, "num_configurable": 6},
}


def train_planted(collection: str, root: Path, epochs: int):  # type: ignore[no-untyped-def]
    train = write_tree(root, collection, "train", 10, seed=0, **SIZES[collection])
    valid = write_tree(root, collection, "valid", 4, seed=1, **SIZES[collection])
    cfg = tiny_config(
        collection, epochs=epochs, lr=5e-3, batch_configs=32, patience=100
    )
    cfg.model.hidden, cfg.model.scorer_hidden = 32, 16
    result = fit(train, valid, cfg, root / "run")
    metrics = get(collection).metrics
    rows = [
        metrics.random_baseline(ex.targets) for ex in ExampleStore(valid, collection)
    ]
    return result.valid_metrics, mean_metrics(rows, metrics.keys)


def test_layout_model_learns_the_planted_signal(tmp_path: Path) -> None:
    got, random = train_planted("layout", tmp_path, epochs=6)
    assert random["kendall_tau"] == 0.0
    assert got["kendall_tau"] is not None and got["kendall_tau"] > 0.7


def test_tile_model_learns_the_planted_signal(tmp_path: Path) -> None:
    got, random = train_planted("tile", tmp_path, epochs=12)
    for key in ("top1_slowdown", "top5_slowdown"):
        assert got[key] is not None and random[key] is not None
        assert got[key] < 0.5 * random[key], (key, got, random)


@pytest.mark.parametrize("collection", ["tile", "layout"])
def test_unplanted_data_is_not_learnable_from_features(
    tmp_path: Path, collection: str
) -> None:
    """Control: the same recipe on random runtimes does not reach the planted bar."""
    sizes = SIZES[collection]
    train = write_tree(tmp_path, collection, "train", 4, seed=0, signal=False, **sizes)
    valid = write_tree(tmp_path, collection, "valid", 2, seed=1, signal=False, **sizes)
    result = fit(train, valid, tiny_config(collection, epochs=2), tmp_path / "run")
    metrics = get(collection).metrics
    rows = [
        metrics.random_baseline(ex.targets) for ex in ExampleStore(valid, collection)
    ]
    random = mean_metrics(rows, metrics.keys)
    if collection == "layout":
        tau = result.valid_metrics["kendall_tau"]
        assert tau is not None and abs(tau) < 0.3
    else:
        for key in ("top1_slowdown", "top5_slowdown"):
            got, rand = result.valid_metrics[key], random[key]
            assert got is not None and rand is not None
            assert got >= 0.5 * rand, (key, result.valid_metrics, random)
