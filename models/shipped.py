"""Rebuild the shipped models from the labelled real files (``make train``).

* tile: the converted official kernels (``pb/official_testdata/op_tuning_data.converted``)
  plus ``npz/tile/xla/train``: only 7 kernels have >= 2 distinct configs, and one of
  them (fusion.191) holds ~93% of the labelled configs, so a single hold-out either
  starves training or measures one kernel. Instead:

  1. leave-one-kernel-out cross-validation (``xla_costmodel.models.crossval``): each rankable kernel
     is scored by a model trained, with the shipped recipe, on every other file;
  2. the shipped model trains on **all** files with the same recipe (a fixed epoch
     count, no early stopping), so it sees every labelled config.

  The manifest's ``metrics`` are the cross-validated numbers from step 1
  (``metrics.validation.method == "leave-one-kernel-out"``), never scores on training
  data. The recipe (epochs etc.) was picked with this same CV from a small grid, so
  the numbers lean slightly optimistic.
* layout: trains on the labelled xla train graphs (``unet3d``; ``openai_v0_rnn_optimized``
  has one distinct config, so it only feeds statistics) for a fixed number of epochs
  and keeps the last; ``npz/layout/xla/default/valid/unet_3d.4x4.bf16.npz`` is never
  trained on, only measured (the settings were chosen on it from a small grid). The
  converted ``module_tuning_data_layout`` file is that same graph and is never used.
  With one rankable training graph, the recipe's outcome depends on the seed (held-out
  Kendall tau 0.035-0.113 over the 5 shipped seeds, the manifest's ``seeds_tau``; so
  does a change that only reorders float sums), so ``LAYOUT_SEEDS`` seeds are trained and the **median** by held-out tau
  is shipped: a typical model of the recipe, not its luckiest draw. The manifest
  lists every seed's tau.

Runs are single-threaded and seeded, so two runs give the same metrics.
Artifacts go to ``models/artifacts/<name>/<version>/`` and the PyTorch checkpoint of each
(the same weights, ~0.3 MB, for eager use: ``bench.torch_eager``) to
``models/checkpoints/<name>/<version>/checkpoint.pt``, both committed; epoch logs and the
cross-validation folds to ``runs/shipped/<name>/`` (not committed).
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from xla_costmodel import paths
from xla_costmodel.paths import existing

if TYPE_CHECKING:
    from xla_costmodel.manifest import Manifest
    from xla_costmodel.models.train import TrainConfig

LAYOUT_TRAIN = [
    "npz/layout/xla/default/train/unet3d.npz",
    "npz/layout/xla/random/train/openai_v0_rnn_optimized.npz",
]
LAYOUT_VALID = ["npz/layout/xla/default/valid/unet_3d.4x4.bf16.npz"]
TILE_EPOCHS = 10
LAYOUT_EPOCHS = 25
LAYOUT_SEEDS = 5  # seeds seed..seed+4; odd, so the median is one of them


def tile_files(data: Path) -> tuple[list[Path], list[Path]]:
    """(all labelled tile files, those with >= 2 distinct configs), in a fixed order."""
    from xla_costmodel.models.data import iter_examples

    files = sorted(
        (data / "pb/official_testdata/op_tuning_data.converted").glob("*.npz")
    )
    files += sorted((data / "npz/tile/xla/train").glob("*.npz"))
    rankable = [Path(ex.name) for ex in iter_examples(files, "tile") if ex.rankable]
    return files, rankable


def tile_config(seed: int, epochs: int) -> TrainConfig:
    """The tile recipe. Leave-one-kernel-out CV over a small grid (epochs 5-80, hinge vs
    ListMLE, lr, weight decay, a smaller net) found 10 epochs of the default net and
    hinge loss best and the most stable across seeds."""
    from xla_costmodel.models.network import ModelConfig
    from xla_costmodel.models.train import TrainConfig

    return TrainConfig(
        "tile",
        epochs=epochs,
        seed=seed,
        batch_configs=64,
        early_stopping=False,
        model=ModelConfig("tile"),
    )


def layout_config(seed: int, epochs: int) -> TrainConfig:
    from xla_costmodel.models.network import ModelConfig
    from xla_costmodel.models.train import TrainConfig

    return TrainConfig(
        "layout",
        epochs=epochs,
        seed=seed,
        batch_configs=32,
        lr=5e-3,
        max_steps_per_graph=16,
        early_stopping=False,
        model=ModelConfig("layout"),
    )


def build_tile(
    data: Path,
    artifact: Path,
    checkpoint: Path,
    runs: Path,
    cfg: TrainConfig,
    console: Console,
) -> Manifest:
    """Cross-validate the recipe, then train on every file and export with CV metrics."""
    from xla_costmodel.models.checkpoint import save_checkpoint
    from xla_costmodel.models.crossval import cross_validate
    from xla_costmodel.models.export import export_artifact
    from xla_costmodel.models.train import fit

    files, rankable = tile_files(data)
    console.print(f"tile: leave-one-kernel-out over {len(rankable)} kernels")
    cv = cross_validate(files, rankable, cfg, runs / "cv")
    console.print(f"tile: training on all {len(files)} files")
    result = fit(files, [], cfg, runs, console)
    save_checkpoint(result, checkpoint)
    manifest = export_artifact(result, artifact, name="tile", version=artifact.name)
    described = {k: cv[k] for k in ("method", "folds", "epochs", "seed", "scored_by")}
    described["note"] = (
        "each kernel scored by a model trained with this recipe on "
        "the other files; the shipped model trained on all of them"
    )
    metrics = {
        "split": "leave-one-kernel-out",
        "validation": described,
        "collection": "tile",
        **{k: cv[k] for k in ("graphs", "mean", "baselines")},
    }
    return _rewrite_metrics(artifact, manifest, metrics)


def build_layout(
    data: Path,
    artifact: Path,
    checkpoint: Path,
    runs: Path,
    cfg: TrainConfig,
    console: Console,
) -> Manifest:
    """Train a fixed number of epochs on the train graphs, once per seed; ship the
    median seed by held-out tau and measure it on the valid graph."""
    from xla_costmodel.models.checkpoint import save_checkpoint
    from xla_costmodel.models.export import export_artifact
    from xla_costmodel.models.train import fit

    train = [data / p for p in LAYOUT_TRAIN]
    valid = [data / p for p in LAYOUT_VALID]
    taus: dict[int, float | None] = {}
    results = {}
    for seed in range(cfg.seed, cfg.seed + LAYOUT_SEEDS):
        console.print(f"layout: seed {seed}")
        result = fit(
            train, valid, replace(cfg, seed=seed), runs / f"seed{seed}", console
        )
        results[seed] = result
        taus[seed] = result.valid_metrics.get("kendall_tau")
    missing = -math.inf  # a seed whose tau is undefined ranks lowest
    ranked = sorted(taus, key=lambda s: (missing if taus[s] is None else taus[s], s))
    kept = ranked[LAYOUT_SEEDS // 2]
    save_checkpoint(results[kept], checkpoint)
    manifest = export_artifact(
        results[kept], artifact, name="layout", version=artifact.name
    )
    described = {
        "method": "held-out graph",
        "files": [str(p) for p in valid],
        "epochs": cfg.epochs,
        "early_stopping": False,
        "seed": kept,
        "seeds_tau": {str(s): t and round(t, 4) for s, t in taus.items()},
        "scored_by": "onnxruntime",
        "note": "last epoch kept; of the seeds, the median by tau over the "
        "graph's distinct configs (seeds_tau, PyTorch); settings "
        "chosen on this graph (small grid)",
    }
    return _rewrite_metrics(
        artifact, manifest, {**manifest.metrics, "validation": described}
    )


def _rewrite_metrics(
    artifact: Path, manifest: Manifest, metrics: dict[str, Any]
) -> Manifest:
    from xla_costmodel.manifest import write_manifest

    manifest = manifest.model_copy(update={"metrics": metrics})
    write_manifest(artifact, manifest)
    return manifest


def run(
    data: Annotated[
        Path, typer.Option(help="The TpuGraphs sample folder.")
    ] = paths.TPUGRAPHS,
    out: Annotated[
        Path, typer.Option(help="Model repository to write.")
    ] = paths.ARTIFACTS,
    checkpoints: Annotated[
        Path, typer.Option(help="PyTorch checkpoints to write (same layout).")
    ] = paths.CHECKPOINTS,
    runs: Annotated[Path, typer.Option(help="Epoch logs and CV folds.")] = paths.RUNS
    / "shipped",
    version: str = "1",
    seed: int = 0,
    tile_epochs: int = TILE_EPOCHS,
    layout_epochs: int = LAYOUT_EPOCHS,
) -> None:
    """Train and export both shipped models, then print their metrics vs baselines."""
    from xla_costmodel.models.checkpoint import CHECKPOINT
    from xla_costmodel.models.crossval import format_rows
    from xla_costmodel.models.evaluate import format_table

    console = Console(stderr=True)
    # Relative paths (from the repo root under `make train`) keep machine paths out of
    # the committed manifests.
    data = Path(os.path.relpath(existing(data, "--data", "TpuGraphs sample")))
    tables = []
    # The shipped models, each named for its collection, with its recipe.
    builds = (
        ("tile", build_tile, tile_config(seed, tile_epochs)),
        ("layout", build_layout, layout_config(seed, layout_epochs)),
    )
    for name, build, cfg in builds:
        console.rule(name)
        artifact, checkpoint = out / name / version, checkpoints / name / version
        manifest = build(data, artifact, checkpoint, runs / name, cfg, console)
        size = sum(f.stat().st_size for f in artifact.iterdir())
        ckpt = (checkpoint / CHECKPOINT).stat().st_size
        console.print(
            f"{artifact}: {size / 1e3:.0f} kB, checkpoint {ckpt / 1e3:.0f} kB"
        )
        method = manifest.metrics["validation"]["method"]
        tables.append(f"{name} ({method})\n" + format_table(manifest.metrics))
        if "folds" in manifest.metrics["validation"]:  # cross-validated: per graph
            tables.append(format_rows(manifest.metrics))
    print("\n\n".join(tables))


def main() -> None:
    typer.run(run)


if __name__ == "__main__":
    main()
