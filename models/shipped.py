"""Rebuild the shipped models from the labelled real files (``make train``).

* tile: the converted official kernels (``pb/official_testdata/op_tuning_data.converted``)
  plus ``npz/tile/xla/train``. Validation is by kernel: of the kernels with >= 2
  distinct configs, ``models.data.holdout_split`` (20% by sha256 of the file name)
  holds some out; the rest train. No kernel is in both.
* layout: trains on the labelled xla train graphs (``unet3d``; ``openai_v0_rnn_optimized``
  has one distinct config, so it only feeds statistics) and validates on
  ``npz/layout/xla/default/valid/unet_3d.4x4.bf16.npz``. The converted
  ``module_tuning_data_layout`` file is that same graph and is never used.

The validation metrics stored in the manifests (and printed) are on the split that
early stopping selected on, so they lean optimistic; with one validation graph for
layout and two kernels for tile they are indications, not benchmarks.

Artifacts go to ``models/artifacts/<name>/<version>/``; checkpoints and epoch logs to
``runs/shipped/<name>/`` (not committed).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "tpugraphs"
LAYOUT_TRAIN = ["npz/layout/xla/default/train/unet3d.npz",
                "npz/layout/xla/random/train/openai_v0_rnn_optimized.npz"]  # fmt: skip
LAYOUT_VALID = ["npz/layout/xla/default/valid/unet_3d.4x4.bf16.npz"]


def tile_split(shared: Path) -> tuple[list[Path], list[Path]]:
    from models.data import holdout_split, iter_examples

    files = sorted(
        (shared / "pb/official_testdata/op_tuning_data.converted").glob("*.npz")
    )
    files += sorted((shared / "npz/tile/xla/train").glob("*.npz"))
    rankable = {Path(ex.name) for ex in iter_examples(files, "tile") if ex.rankable}
    _, valid = holdout_split([f for f in files if f in rankable])
    return [f for f in files if f not in valid], valid


def run(
    shared: Annotated[Path, typer.Option(help="The TpuGraphs sample folder.")] = SHARED,
    out: Annotated[Path, typer.Option(help="Model repository to write.")] = REPO
    / "models"
    / "artifacts",
    runs: Annotated[Path, typer.Option(help="Checkpoints and logs.")] = REPO
    / "runs"
    / "shipped",
    version: str = "1",
    seed: int = 0,
    tile_epochs: int = 40,
    layout_epochs: int = 25,
) -> None:
    """Train and export both shipped models, then print their metrics vs baselines."""
    from models.checkpoint import save_checkpoint
    from models.evaluate import format_table
    from models.export import export_artifact
    from models.network import ModelConfig
    from models.train import TrainConfig, fit

    console = Console(stderr=True)
    # Relative paths (from the repo root under `make train`) keep machine paths out of
    # the committed manifests.
    shared = Path(os.path.relpath(shared.resolve()))
    tile_train, tile_valid = tile_split(shared)
    plans = {
        "tile": (tile_train, tile_valid, TrainConfig(
            "tile", epochs=tile_epochs, seed=seed, batch_configs=64, patience=12,
            model=ModelConfig("tile"))),
        "layout": ([shared / p for p in LAYOUT_TRAIN], [shared / p for p in LAYOUT_VALID],
                   TrainConfig("layout", epochs=layout_epochs, seed=seed, batch_configs=32,
                               lr=5e-3, max_steps_per_graph=16, patience=8,
                               model=ModelConfig("layout"))),
    }  # fmt: skip
    tables = []
    for name, (train, valid, cfg) in plans.items():
        console.rule(f"{name}: {len(train)} train files, {len(valid)} validation files")
        result = fit(train, valid, cfg, runs / name, console)
        save_checkpoint(result, runs / name)
        artifact = out / name / version
        manifest = export_artifact(result, artifact, name=name, version=version)
        size = sum(f.stat().st_size for f in artifact.iterdir())
        console.print(
            f"{artifact}: {size / 1e3:.0f} kB, trained in {result.summary['seconds']} s"
        )
        tables.append(format_table(manifest.metrics))
    print("\n\n".join(tables))


def main() -> None:
    typer.run(run)


if __name__ == "__main__":
    main()
