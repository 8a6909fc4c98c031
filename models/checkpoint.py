"""Checkpoints: a trained model plus its training summary, for ``export`` to re-export."""

from __future__ import annotations

from pathlib import Path

import torch

from models.network import CostModel, ModelConfig
from models.train import TrainResult

CHECKPOINT = "checkpoint.pt"


def save_checkpoint(result: TrainResult, out_dir: Path) -> Path:
    """Write ``out_dir/checkpoint.pt`` (tensors and plain data only)."""
    path = out_dir / CHECKPOINT
    blob = {
        "model_config": result.model.cfg.to_dict(),
        "state_dict": result.model.state_dict(),
        "training": result.summary,
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
