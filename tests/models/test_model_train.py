"""Training loop: what early stopping does when validation cannot select."""

from __future__ import annotations

from pathlib import Path

import pytest
from modelkit import tiny_config

from xla_costmodel.models.synthetic import make_tile_arrays, write_npz, write_tree
from xla_costmodel.models.train import fit


def test_unrankable_validation_warns_and_keeps_the_last_epoch(tmp_path: Path) -> None:
    """Before: every epoch scored -inf, so epoch 1 was kept and training stopped early."""
    train = write_tree(tmp_path, "tile", "train", 2, num_nodes=8, num_configs=20)
    arrays = make_tile_arrays(num_nodes=8, num_configs=3, seed=7)
    arrays["config_feat"][:] = arrays["config_feat"][0]  # one distinct config
    valid = [write_npz(tmp_path / "valid" / "single.npz", arrays)]
    cfg = tiny_config("tile", epochs=3, patience=1)
    with pytest.warns(UserWarning, match="early stopping is off"):
        result = fit(train, valid, cfg, tmp_path / "run")
    summary = result.summary
    assert (summary["epochs_run"], summary["best_epoch"]) == (3, 3)
    assert summary["epoch_selected_on_validation"] is False


def test_rankable_validation_selects_the_epoch(tmp_path: Path) -> None:
    train = write_tree(tmp_path, "tile", "train", 2, num_nodes=8, num_configs=20)
    valid = write_tree(
        tmp_path, "tile", "valid", 1, seed=1, num_nodes=8, num_configs=20
    )
    result = fit(train, valid, tiny_config("tile", epochs=2), tmp_path / "run")
    assert result.summary["epoch_selected_on_validation"] is True
    assert result.valid_metrics["top1_slowdown"] is not None
