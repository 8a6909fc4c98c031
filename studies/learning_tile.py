"""Phase 1 of ``xla_costmodel.studies.learning``: the tile leave-one-kernel-out learning curve.

Each rankable kernel is held out in turn (``xla_costmodel.models.crossval.kernel_folds``: one fold
per graph, so files of one graph stay together): a tile model is trained with the
shipped recipe (``xla_costmodel.models.shipped.tile_config``, ``TILE_EPOCHS``, seed 0) on every other
file and exported as ``tile-loko-<i>``. One service serves them all; the replay
autotuner (``xla_costmodel.clients.replay.Replayer`` with rounds) then runs on each held-out kernel
with the model that never saw it, so every figure here is on an unseen kernel.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

from xla_costmodel.clients import CostModelClient
from xla_costmodel.clients.replay import Budget, Replayer, default_config
from xla_costmodel.tpugraphs.reader import load_npz

Log = Callable[[str], None]
STRATEGIES = ("slowdown", "model_slowdown", "random_slowdown", "per_graph_slowdown")
TILE_TARGET = "tpu-v3"
# The long curve replays kernels already replayed in the short one; measurements
# are keyed by (collection, target, graph), so a target of its own keeps the two
# runs apart (the same prior, an empty measurement set).
LONG_TARGET = "tpu-v3.long-curve"


@dataclass(frozen=True)
class Kernel:
    index: int  # the model is tile-loko-<index>
    files: list[Path]  # the held-out files (one graph)
    train_files: int

    @property
    def model(self) -> str:
        return f"tile-loko-{self.index}"


def train_models(
    shared: Path,
    artifacts: Path,
    runs: Path,
    kernels: int | None,
    epochs: int,
    log: Log,
) -> list[Kernel]:
    """Train and export one model per held-out kernel; ``kernels`` None: all."""
    from rich.console import Console

    from xla_costmodel.models.crossval import kernel_folds
    from xla_costmodel.models.export import export_artifact
    from xla_costmodel.models.shipped import tile_config, tile_files
    from xla_costmodel.models.train import fit
    from xla_costmodel.tpugraphs.reader import file_graph

    _quiet_exporter()
    files, rankable = tile_files(shared)
    graphs = {p: file_graph(p)[0] for p in dict.fromkeys([*files, *rankable])}
    folds = kernel_folds(files, rankable, None, graphs)[:kernels]
    quiet = Console(stderr=True, quiet=True)
    out = []
    for i, (train, test) in enumerate(folds):
        log(f"tile: training tile-loko-{i} without {', '.join(p.stem for p in test)}")
        result = fit(train, [], tile_config(0, epochs), runs / f"fold{i}", quiet)
        export_artifact(
            result,
            artifacts / f"tile-loko-{i}" / "1",
            name=f"tile-loko-{i}",
            version="1",
            target=TILE_TARGET,
        )
        out.append(Kernel(i, list(test), len(train)))
    return out


def _quiet_exporter() -> None:
    """torch.onnx logs a warning per missing torchvision op on every export."""
    for name in (
        "torch.onnx",
        "torch._dynamo",
        "torch.export",
        "onnxscript",
        "onnx_ir",
    ):
        logging.getLogger(name).setLevel(logging.ERROR)


def replay_kernels(
    client: CostModelClient,
    kernels: Sequence[Kernel],
    rounds: int,
    budget: int,
    target: str,
    min_configs: int = 0,
) -> list[dict[str, Any]]:
    """Replay each held-out file with its own model; one row per file."""
    rows = []
    for kernel in kernels:
        for path in kernel.files:
            sample = load_npz(path)
            if sample.num_configs < min_configs:
                continue
            replayer = Replayer(
                client,
                Budget(count=budget),
                model=kernel.model,
                rounds=rounds,
                target=target,
            )
            graph = replayer.run([path]).graphs[0]
            assert graph.rounds is not None
            d = default_config(sample)
            best = float(sample.runtimes.min())
            rows.append(
                {
                    "kernel": path.stem,
                    "model": kernel.model,
                    "configs": sample.num_configs,
                    "default_config": d,
                    "default_slowdown": None
                    if d is None
                    else float(sample.runtimes[d]) / best - 1.0,
                    "feedback_stored": graph.feedback_stored,
                    "rounds": [
                        {
                            "round": r.round,
                            "measured": r.measured,
                            "adapted": r.adapted,
                            **{k: getattr(r, k) for k in STRATEGIES},
                        }
                        for r in graph.rounds
                    ],
                }
            )
    return rows


def round_means(
    rows: Sequence[dict[str, Any]], rounds: int, budget: int
) -> list[dict[str, Any]]:
    """Per round, the mean over kernels of each strategy and of the default config.

    A kernel whose configs ran out keeps its last round (every strategy has then
    measured all its configs); ``measured`` is the nominal round * budget.
    """
    out = []
    defaults = [
        r["default_slowdown"] for r in rows if r["default_slowdown"] is not None
    ]
    for i in range(rounds):
        at = [r["rounds"][min(i, len(r["rounds"]) - 1)] for r in rows]
        mean: dict[str, Any] = {"round": i + 1, "measured": (i + 1) * budget}
        mean.update({k: fmean(x[k] for x in at) for k in STRATEGIES})
        mean["default_slowdown"] = fmean(defaults) if defaults else None
        mean["kernels"] = len(at)
        out.append(mean)
    return out


def goal(means: Sequence[dict[str, Any]], measured: int) -> dict[str, Any]:
    """The issue's goal: after ``measured`` configs, model + adaptation's mean slowdown
    is at most the default config's and below random's."""
    row = next((m for m in means if m["measured"] == measured), None)
    if row is None:
        return {"measured": measured, "evaluated": False}
    default = row["default_slowdown"]
    vs_default = default is not None and row["slowdown"] <= default
    return {
        "measured": measured,
        "evaluated": True,
        "slowdown": row["slowdown"],
        "default_slowdown": default,
        "random_slowdown": row["random_slowdown"],
        "at_most_default": vs_default,
        "below_random": row["slowdown"] < row["random_slowdown"],
        "met": vs_default and row["slowdown"] < row["random_slowdown"],
    }


def run(
    client: CostModelClient, kernels: Sequence[Kernel], plan: Any
) -> dict[str, Any]:
    """Short curve on every held-out kernel, long curve on the big ones."""
    rows = replay_kernels(
        client, kernels, plan.tile_rounds, plan.tile_budget, TILE_TARGET
    )
    means = round_means(rows, plan.tile_rounds, plan.tile_budget)
    long_rows = replay_kernels(
        client,
        kernels,
        plan.long_rounds,
        plan.tile_budget,
        LONG_TARGET,
        plan.long_min_configs,
    )
    return {
        "protocol": {
            "method": "leave-one-kernel-out (xla_costmodel.models.crossval.kernel_folds), shipped "
            "tile recipe (xla_costmodel.models.shipped.tile_config, seed 0) on every other file",
            "epochs": plan.tile_epochs,
            "rounds": plan.tile_rounds,
            "budget": plan.tile_budget,
            "target": TILE_TARGET,
            "kernels": len(rows),
            "train_files_per_model": [k.train_files for k in kernels],
        },
        "kernels": rows,
        "rounds": means,
        "goal": goal(means, plan.tile_rounds * plan.tile_budget),
        "long_curve": {
            "rounds": plan.long_rounds,
            "budget": plan.tile_budget,
            "min_configs": plan.long_min_configs,
            "target": LONG_TARGET,
            "kernels": long_rows,
            "means": round_means(long_rows, plan.long_rounds, plan.tile_budget)
            if long_rows
            else [],
        },
    }
