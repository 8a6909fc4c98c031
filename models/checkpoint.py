"""Checkpoints: a trained model plus its training summary (``TrainResult``, what
``train.fit`` returns), for ``export`` to re-export and for PyTorch users (the
benchmark's eager phase) to load the served weights.

A checkpoint holds tensors and plain data only (no pickled classes), so it loads with
``torch.load(weights_only=True)``. ``make train`` ships one per artifact at
``models/checkpoints/<name>/<version>/checkpoint.pt``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from xla_costmodel.models.network import CostModel, ModelConfig

CHECKPOINT = "checkpoint.pt"


# Here, below train and export, so that both import it and neither imports the other.
@dataclass
class TrainResult:
    model: CostModel
    summary: dict[str, Any]  # goes into the manifest's ``training``
    valid_metrics: dict[str, float | None]


def save_checkpoint(result: TrainResult, out_dir: Path) -> Path:
    """Write ``out_dir/checkpoint.pt`` (tensors and plain data only). The training
    summary's wall-clock ``seconds`` is left out, so the same training run writes the
    same bytes (a re-run of ``make train`` leaves the committed file unchanged)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / CHECKPOINT
    blob = {
        "model_config": result.model.cfg.to_dict(),
        "state_dict": result.model.state_dict(),
        "training": {k: v for k, v in result.summary.items() if k != "seconds"},
        "valid_metrics": result.valid_metrics,
    }
    torch.save(blob, path)
    return path


def load_checkpoint(path: Path) -> TrainResult:
    # weights_only: a checkpoint is data, never code to run.
    blob = torch.load(path, map_location="cpu", weights_only=True)
    model = CostModel(ModelConfig(**blob["model_config"]))
    model.load_state_dict(blob["state_dict"])
    model.eval()
    return TrainResult(model, blob["training"], blob["valid_metrics"])
