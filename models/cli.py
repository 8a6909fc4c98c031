"""Command functions ``train``, ``evaluate`` and ``export`` (registered by ``xla_costmodel.cli``).

Nothing heavy is imported at module level: ``costmodel serve`` imports this module too,
and the service does not need torch. Several paths are given by repeating the option
(``--data A --data B``); each may be a file or a directory (searched recursively for
``*.npz``, files of the other collection skipped), so a full dataset tree works as is::

    costmodel train --collection tile --data <dataset>/npz/tile/xla/train \\
        --valid <dataset>/npz/tile/xla/valid --out runs/tile/1

``--init ARTIFACT_DIR`` fine-tunes a served artifact on the new files instead of
training from scratch (``xla_costmodel.models.finetune``)::

    costmodel train --collection tile --data measured/ --init models/artifacts/tile/1 \\
        --out models/artifacts/tile/2
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from xla_costmodel.tpugraphs.spec import COLLECTION_NAMES, Collection

if TYPE_CHECKING:
    from rich.console import Console

    from xla_costmodel.manifest import Manifest
    from xla_costmodel.models.finetune import InitArtifact
    from xla_costmodel.models.network import ModelConfig
    from xla_costmodel.models.train import TrainConfig


# The choices of --collection: every declared collection (spec.Collection, which the
# registry in tpugraphs/collections.py declares exactly; numpy-free, so cheap here).
CollectionName = StrEnum("CollectionName", [(n, n) for n in COLLECTION_NAMES])  # type: ignore[misc]


OUT_HELP = "Artifact directory to write (its name is the version if numeric, else 1)."
VALID_HELP = (
    "Validation files/dirs; --data files holding the same graphs (the same paths, or "
    "copies with the same graph id) are not trained on. Default: hold out 20% of the "
    "labelled training graphs, chosen by sha256 of their file names."
)
INIT_HELP = (
    "Fine-tune this artifact (manifest.json + onnx) instead of starting from scratch: "
    "same collection, its architecture, name and target; the manifest's training.init "
    "names it."
)


def train(  # noqa: PLR0913 -- typer: one parameter per command-line option
    collection: Annotated[CollectionName, typer.Option(help="Which model to train.")],
    data: Annotated[
        list[Path], typer.Option(help="Training npz files or directories.")
    ],
    out: Annotated[Path, typer.Option(help=OUT_HELP)],
    valid: Annotated[list[Path] | None, typer.Option(help=VALID_HELP)] = None,
    epochs: Annotated[
        int, typer.Option(min=0, help="Maximum epochs (early stopping).")
    ] = 30,
    seed: Annotated[int, typer.Option(help="Seed for torch, numpy and random.")] = 0,
    batch_configs: Annotated[int, typer.Option(help="Configs ranked per step.")] = 64,
    lr: Annotated[float, typer.Option(help="AdamW learning rate.")] = 2e-3,
    hidden: Annotated[
        int | None,
        typer.Option(
            min=1, help="Node state width (default 64; --init: the artifact's)."
        ),
    ] = None,
    layers: Annotated[
        int | None,
        typer.Option(
            min=1, help="Message-passing rounds (default 3; --init: the artifact's)."
        ),
    ] = None,
    patience: Annotated[int, typer.Option(help="Epochs without improvement.")] = 8,
    init: Annotated[Path | None, typer.Option(help=INIT_HELP)] = None,
) -> None:
    """Train a cost model of one collection (tile, layout, xla_cpu) on CPU (from
    scratch, or fine-tuning --init), then export it to --out."""
    from rich.console import Console

    from xla_costmodel.models.evaluate import format_table
    from xla_costmodel.models.train import TrainConfig
    from xla_costmodel.tpugraphs.collections import get

    name = get(collection.value).name
    console = Console(stderr=True)
    model, start = _start(name, init, out, hidden, layers)
    train_files, valid_files = _files(name, data, valid, console)
    cfg = TrainConfig(
        name,
        epochs=epochs,
        seed=seed,
        lr=lr,
        batch_configs=batch_configs,
        patience=patience,
        model=model,
    )
    console.print(
        f"{name}: {len(train_files)} training files, {len(valid_files)} validation"
    )
    manifest = _train(start, train_files, valid_files, cfg, out, console)
    console.print(f"wrote {out} ({manifest.name} v{manifest.version})")
    if manifest.metrics:
        print(format_table(manifest.metrics))


def _start(
    name: Collection,
    init: Path | None,
    out: Path,
    hidden: int | None,
    layers: int | None,
) -> tuple[ModelConfig, InitArtifact | None]:
    """The architecture, and the artifact to fine-tune (checked against --out)."""
    from xla_costmodel.models.finetune import InitError, check_out

    try:
        model, start = _architecture(name, init, hidden=hidden, layers=layers)
        if start is not None:
            check_out(start, out)
    except InitError as exc:
        _fail(str(exc))
    return model, start


def _files(
    name: Collection, data: list[Path], valid: list[Path] | None, console: Console
) -> tuple[list[Path], list[Path]]:
    """Training and validation files: --valid's, else a held-out share of --data."""
    from xla_costmodel.models.data import (
        collection_files,
        holdout_split,
        without_graphs_of,
    )

    train_files = collection_files(data, name)
    if not valid:
        return holdout_split(train_files)
    valid_files = collection_files(valid, name)
    train_files, dropped = without_graphs_of(train_files, valid_files)
    if dropped:
        console.print(
            f"{len(dropped)} --data files are (copies of) validation graphs: "
            "not trained on"
        )
    return train_files, valid_files


def _train(
    start: InitArtifact | None,
    train_files: list[Path],
    valid_files: list[Path],
    cfg: TrainConfig,
    out: Path,
    console: Console,
) -> Manifest:
    """Fine-tune ``start``, or train from scratch; export to ``out``."""
    from xla_costmodel.models.checkpoint import save_checkpoint
    from xla_costmodel.models.export import export_artifact
    from xla_costmodel.models.finetune import InitError, finetune
    from xla_costmodel.models.train import fit

    if start is None:
        result = fit(train_files, valid_files, cfg, out, console)
        save_checkpoint(result, out)
        return export_artifact(result, out)
    console.print(f"fine-tuning {start.path} (weights from {start.weights})")
    try:
        return finetune(start, train_files, valid_files, cfg, out, console)
    except InitError as exc:
        _fail(str(exc))


def _architecture(
    name: Collection, init: Path | None, **given: int | None
) -> tuple[ModelConfig, InitArtifact | None]:
    """The network to train and, with --init, the artifact it starts from (whose
    architecture wins; an architecture flag given explicitly must agree with it)."""
    from xla_costmodel.models.finetune import architecture, load_init
    from xla_costmodel.models.network import ModelConfig

    if init is None:
        chosen = {k: v for k, v in given.items() if v is not None}
        return ModelConfig(name, **chosen), None
    start = load_init(init, name)
    return architecture(start, **given), start


def _fail(message: str) -> NoReturn:
    """One ``error: ...`` line on stderr, exit status 2 (as for a bad option)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


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
    from xla_costmodel.models.evaluate import evaluate_artifact, format_table

    report = evaluate_artifact(
        model, data, note=lambda msg: print(msg, file=sys.stderr)
    )
    if json_:
        print(json.dumps(report, allow_nan=False))
        return
    for row in report["graphs"]:
        print(
            f"{row['graph']}: "
            + ", ".join(f"{k}={v:.4f}" for k, v in row.items() if isinstance(v, float))
        )
    print(format_table(report))


def export(
    checkpoint: Annotated[Path, typer.Option(help="checkpoint.pt written by train.")],
    out: Annotated[Path, typer.Option(help="Artifact directory to write.")],
) -> None:
    """Export a saved checkpoint as an artifact (encoder.onnx, scorer.onnx, manifest)."""
    from xla_costmodel.models.checkpoint import load_checkpoint
    from xla_costmodel.models.export import export_artifact

    manifest = export_artifact(load_checkpoint(checkpoint), out)
    print(f"wrote {out} ({manifest.name} v{manifest.version})", file=sys.stderr)
