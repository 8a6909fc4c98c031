"""Command functions ``train``, ``evaluate`` and ``export`` (registered by ``costmodel.cli``).

Nothing heavy is imported at module level: ``costmodel serve`` imports this module too,
and the service does not need torch. Several paths are given by repeating the option
(``--data A --data B``); each may be a file or a directory (searched recursively for
``*.npz``, files of the other collection skipped), so a full dataset tree works as is::

    costmodel train --collection tile --data <dataset>/npz/tile/xla/train \\
        --valid <dataset>/npz/tile/xla/valid --out runs/tile/1
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer


class CollectionName(StrEnum):
    tile = "tile"
    layout = "layout"


OUT_HELP = "Artifact directory to write (its name is the version if numeric, else 1)."
VALID_HELP = (
    "Validation files/dirs; --data files holding the same graphs (the same paths, or "
    "copies with the same graph id) are not trained on. Default: hold out 20% of the "
    "labelled training graphs, chosen by sha256 of their file names."
)


def train(
    collection: Annotated[CollectionName, typer.Option(help="Which model to train.")],
    data: Annotated[
        list[Path], typer.Option(help="Training npz files or directories.")
    ],
    out: Annotated[Path, typer.Option(help=OUT_HELP)],
    valid: Annotated[list[Path] | None, typer.Option(help=VALID_HELP)] = None,
    epochs: Annotated[int, typer.Option(help="Maximum epochs (early stopping).")] = 30,
    seed: Annotated[int, typer.Option(help="Seed for torch, numpy and random.")] = 0,
    batch_configs: Annotated[int, typer.Option(help="Configs ranked per step.")] = 64,
    lr: Annotated[float, typer.Option(help="AdamW learning rate.")] = 2e-3,
    hidden: Annotated[int, typer.Option(help="Node state width.")] = 64,
    layers: Annotated[int, typer.Option(help="Message-passing rounds.")] = 3,
    patience: Annotated[int, typer.Option(help="Epochs without improvement.")] = 8,
) -> None:
    """Train a tile or layout cost model on CPU, then export it to --out."""
    from rich.console import Console

    from models.checkpoint import save_checkpoint
    from models.data import collection_files, holdout_split, without_graphs_of
    from models.evaluate import format_table
    from models.export import export_artifact
    from models.network import ModelConfig
    from models.train import TrainConfig, fit

    name = collection.value
    console = Console(stderr=True)
    train_files = collection_files(data, name)
    if valid:
        valid_files = collection_files(valid, name)
        train_files, dropped = without_graphs_of(train_files, valid_files)
        if dropped:
            console.print(
                f"{len(dropped)} --data files are (copies of) validation graphs: "
                "not trained on"
            )
    else:
        train_files, valid_files = holdout_split(train_files)
    model = ModelConfig(name, hidden=hidden, layers=layers)  # type: ignore[arg-type]
    cfg = TrainConfig(name, epochs=epochs, seed=seed, lr=lr, batch_configs=batch_configs,  # type: ignore[arg-type]
                      patience=patience, model=model)  # fmt: skip
    console.print(
        f"{name}: {len(train_files)} training files, {len(valid_files)} validation"
    )
    result = fit(train_files, valid_files, cfg, out, console)
    save_checkpoint(result, out)
    manifest = export_artifact(result, out)
    console.print(f"wrote {out} ({manifest.name} v{manifest.version})")
    if manifest.metrics:
        print(format_table(manifest.metrics))


def evaluate(
    model: Annotated[
        Path, typer.Option(help="Artifact directory (manifest.json + onnx).")
    ],
    data: Annotated[
        list[Path], typer.Option(help="Labelled npz files or directories.")
    ],
    json_: Annotated[
        bool, typer.Option("--json", help="Print only the JSON report.")
    ] = False,
) -> None:
    """Evaluate an artifact with onnxruntime (as served): metrics vs baselines."""
    from models.evaluate import evaluate_artifact, format_table

    report = evaluate_artifact(
        model, data, note=lambda msg: print(msg, file=sys.stderr)
    )
    if json_:
        print(json.dumps(report, allow_nan=False))
        return
    for row in report["graphs"]:
        print(f"{row['graph']}: " + ", ".join(
            f"{k}={v:.4f}" for k, v in row.items() if isinstance(v, float)))  # fmt: skip
    print(format_table(report))


def export(
    checkpoint: Annotated[Path, typer.Option(help="checkpoint.pt written by train.")],
    out: Annotated[Path, typer.Option(help="Artifact directory to write.")],
) -> None:
    """Export a saved checkpoint as an artifact (encoder.onnx, scorer.onnx, manifest)."""
    from models.checkpoint import load_checkpoint
    from models.export import export_artifact

    manifest = export_artifact(load_checkpoint(checkpoint), out)
    print(f"wrote {out} ({manifest.name} v{manifest.version})", file=sys.stderr)
