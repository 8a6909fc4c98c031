"""The same trained tile model in PyTorch eager, in process: what a researcher would
run instead of the service. torch is imported only inside these functions, so the
harness works (and reports null) where torch is not installed.

The weights come from the artifact's PyTorch checkpoint: beside its ONNX files if it was
written there (``costmodel train --out``), else the one ``make train`` ships with the repo,
``models/checkpoints/<name>/<version>/checkpoint.pt``, so a fresh clone has it. The phase
checks that eager and onnxruntime scores agree on the timed batch, and reports nothing
for a checkpoint of another model.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from xla_costmodel import paths
from xla_costmodel.bench.data import F32
from xla_costmodel.bench.inproc import Budget
from xla_costmodel.bench.timing import Timings, time_calls
from xla_costmodel.tpugraphs.arrays import Graph

CHECKPOINT = "checkpoint.pt"  # xla_costmodel.models.train.CHECKPOINT, named here to avoid importing torch
CHECKPOINTS = paths.CHECKPOINTS  # from the repository root (make)
SAME_MODEL_ATOL = 1e-3  # float32 eager vs onnxruntime (folded weights) on raw scores


@dataclass(frozen=True)
class EagerResult:
    timings: Timings | None  # None: no torch, no checkpoint, or another model's
    note: str  # where the weights came from, or why there is no timing
    threads: int | None = None
    max_abs_diff: float | None = None  # eager vs onnxruntime on the timed batch

    def figures(self, configs: int) -> dict[str, Any]:
        rate = None if self.timings is None else self.timings.rate(configs)
        return {
            "torch_eager_configs_per_s": rate,
            "torch_threads": self.threads,
            "torch_max_abs_diff_vs_onnx": self.max_abs_diff,
            "torch_eager_note": self.note,
        }


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def checkpoint_path(artifact_dir: Path) -> Path | None:
    """The checkpoint of ``<model_dir>/<name>/<version>``, or None."""
    shipped = CHECKPOINTS / artifact_dir.parent.name / artifact_dir.name
    for path in (artifact_dir / CHECKPOINT, shipped / CHECKPOINT):
        if path.is_file():
            return path.resolve()
    return None


def tile_scorer(
    artifact_dir: Path,
    graph: Graph,
    configs: F32,
    onnx_scores: F32,
    budget: Budget,
    threads: int,
) -> EagerResult:
    """Scorer-only eager time on one batch (embedding computed once, untimed): the same
    work as the raw onnxruntime phase. No timing without torch or a checkpoint."""
    if not torch_available():
        return EagerResult(None, "torch is not installed")
    path = checkpoint_path(artifact_dir)
    if path is None:
        shipped = CHECKPOINTS / artifact_dir.parent.name / artifact_dir.name
        return EagerResult(None, f"no {CHECKPOINT} in {artifact_dir} or {shipped}")
    import torch

    model = load_model(path)
    # The same thread budget as onnxruntime gets: with torch's default (every core)
    # on a shared 2-core machine, its OpenMP workers wait on each other and a call
    # took 30x longer in one run.
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _time_eager(model, graph, configs, onnx_scores, budget, path)
    finally:
        torch.set_num_threads(previous)


def _time_eager(
    model: Any, graph: Graph, configs: F32, onnx_scores: F32, budget: Budget, path: Path
) -> EagerResult:
    import torch

    with torch.inference_mode():
        (embedding,) = model.encode(graph_tensors(graph))

        def run() -> Any:
            return model.scorer(embedding, torch.from_numpy(configs)).numpy()

        diff = float(np.max(np.abs(run() - onnx_scores)))
        if diff > SAME_MODEL_ATOL * max(1.0, float(np.max(np.abs(onnx_scores)))):
            note = f"{_shown(path)} is not the artifact's model (scores differ by {diff:.3g})"
            return EagerResult(None, note, torch.get_num_threads(), diff)
        timings = time_calls(run, budget.repeats, budget.seconds)
    note = f"weights from {_shown(path)}"
    return EagerResult(timings, note, torch.get_num_threads(), diff)


def _shown(path: Path) -> str:
    """The checkpoint as the saved JSON names it: relative to the checkout (an absolute
    path would name the machine that ran the bench)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return path.name


def load_model(path: Path) -> Any:
    """``xla_costmodel.models.network.CostModel`` with a checkpoint's weights (the blob that
    ``models`` saves: ``model_config`` and ``state_dict``), in eval mode."""
    import torch

    from xla_costmodel.models.network import CostModel, ModelConfig

    blob = torch.load(path, map_location="cpu", weights_only=True)
    model = CostModel(ModelConfig(**blob["model_config"]))
    model.load_state_dict(blob["state_dict"])
    return model.eval()


def graph_tensors(graph: Graph) -> dict[str, Any]:
    import torch

    return {
        "node_feat": torch.from_numpy(graph.node_feat),
        "node_opcode": torch.from_numpy(graph.node_opcode.astype(np.int64)),
        "edge_index": torch.from_numpy(graph.edge_index),
    }
