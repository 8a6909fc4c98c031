"""Evaluation helpers: finding the official eval_indices table for a layout file."""

from __future__ import annotations

import json
from pathlib import Path

from xla_costmodel.models.evaluate import eval_indices_for


def test_eval_indices_use_the_layout_folder_under_npz(tmp_path: Path) -> None:
    """A folder named ``layout`` higher up (a checkout under ~/layout) is not the
    collection folder: the one after ``npz`` is."""
    root = tmp_path / "layout" / "dataset"
    (root / "eval_indices").mkdir(parents=True)
    (root / "eval_indices" / "xla_default.json").write_text(json.dumps({"g": [2, 0]}))
    path = root / "npz" / "layout" / "xla" / "default" / "valid" / "g.npz"
    assert eval_indices_for(path) == [2, 0]
    assert (
        eval_indices_for(root / "npz" / "layout" / "xla" / "default" / "x.npz") is None
    )
