"""The xla_cpu model: cross-validation leaving families and targets out, then the
shipped artifact.

``python -m xla_costmodel.models.xla_cpu_recipe [--data datasets/xla_cpu]
[--out models/artifacts/xla_cpu/1] [--json]`` (``make train-xla-cpu``).

The dataset holds one folder per target (CPU), each with zoo programs of a dozen
architecture families measured under the same sampled option sets
(``xla_cpu2.sample``, row 0 the default). The model trains on every target pooled
(targets are runtime / the program's default on its own CPU). Programs of one
family share most of their HLO, so a split by program would score the model on
near-copies of what it trained on. Each **family** fold holds out one whole family
(on every target) and trains, with the recipe below, on the other families; each
**target** fold holds out one whole CPU (a new machine joining the fleet). The
held-out programs are ranked over all their collected configs. Baselines, per
held-out program:

- ``default``: XLA's own options (row 0) ranked first;
- ``random``: the exact expectation over random orders;
- ``fixed``: the one option set with the best geometric-mean runtime/default over
  the fold's **training** programs (rows matched by content among those every
  training program measured; a config that failed to compile somewhere is not a
  candidate), applied as is. A held-out program that could not compile it keeps
  the default. It is the baseline to beat (the project's XLA:CPU measurements showed it
  winning on average and losing on the programs that need their own choice).

Then the shipped model trains on every program of every target with the same recipe
(fixed epochs, no early stopping) and is exported listing every target (``targets``;
``target``: the one with most programs), with **per-target seeds** of target
knowledge (``knowledge.npz``: each program's relative runtimes, the per-target part
of the model; ``xla_costmodel.tpugraphs.knowledge``). Its manifest's ``metrics`` are
the cross-validated numbers. The fold models' scores are cached in
``runs/xla_cpu/cv.json`` (keyed by the data's and the recipe's fingerprint); the
target folds' scores are the prior of the fleet simulation
(``xla_costmodel.studies.fleet``). Training is single-threaded and seeded: a rerun
gives the same numbers.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer
from rich.console import Console

from xla_costmodel import paths
from xla_costmodel.models.evaluate import nan_to_none
from xla_costmodel.models.xla_cpu_cv import Fold, cross_validate
from xla_costmodel.models.xla_cpu_programs import (
    F32,
    F64,
    Program,
    compilers,
    families,
    fixed_runtime,
    load_programs,
    targets_of,
    write_seeds,
)
from xla_costmodel.paths import existing
from xla_costmodel.tpugraphs import xla_cpu2
from xla_costmodel.tpugraphs.collections import XLA_CPU
from xla_costmodel.tpugraphs.metrics import mean_metrics

if TYPE_CHECKING:
    from xla_costmodel.models.train import TrainConfig

# The recipe (chosen with this same CV from a small grid, so its numbers lean
# slightly optimistic): a small net, a few epochs over ~100 configs per program.
EPOCHS = 8
HIDDEN = 32
LAYERS = 2
METHOD = "leave-families-out"
SEEDS_FILE = "knowledge.npz"


def recipe_config(seed: int = 0, epochs: int = EPOCHS) -> TrainConfig:
    from xla_costmodel.models.network import ModelConfig
    from xla_costmodel.models.train import TrainConfig

    model = ModelConfig(
        "xla_cpu", hidden=HIDDEN, layers=LAYERS, embed=HIDDEN, scorer_hidden=HIDDEN
    )
    return TrainConfig(
        "xla_cpu",
        epochs=epochs,
        seed=seed,
        batch_configs=64,
        max_steps_per_graph=2,
        early_stopping=False,
        model=model,
    )


def program_row(program: Program, scores: F64, row: F32) -> dict[str, Any]:
    """One held-out program: the model's metrics and the three baselines."""
    targets = program.targets()
    metrics = XLA_CPU.metrics
    fixed = fixed_runtime(program, row) / program.runtimes[0]
    return {
        "graph": program.name,
        "target": program.target,
        "family": program.family,
        "num_configs": len(targets),
        **metrics(scores, targets),
        "default": metrics.default_baseline(targets, 1.0),
        "random": metrics.random_baseline(targets),
        "fixed": metrics.default_baseline(targets, fixed),
        "fixed_is_default": bool(np.array_equal(row, xla_cpu2.default_row())),
    }


def _means(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    keys = XLA_CPU.metrics.keys
    return {
        "graphs": len(rows),
        "model": mean_metrics(rows, keys),
        **{
            b: mean_metrics([r[b] for r in rows], keys)
            for b in ("default", "random", "fixed")
        },
    }


def cv_report(
    programs: Sequence[Program], folds: Sequence[Fold], cfg: TrainConfig
) -> dict[str, Any]:
    """Per-program rows, per-family and overall means (over programs), from the
    family folds; per held-out target, from the target folds."""
    by_key = {p.key: p for p in programs}

    def rows_of(kind: str) -> list[dict[str, Any]]:
        return [
            program_row(by_key[k], np.asarray(s), np.asarray(f.fixed_row, np.float32))
            for f in folds
            if f.kind == kind
            for k, s in f.scores.items()
        ]

    rows, by_target = rows_of("family"), rows_of("target")
    target_folds = [f for f in folds if f.kind == "target"]
    folds = [f for f in folds if f.kind == "family"]
    per_family = {
        f.family: _means([r for r in rows if r["family"] == f.family]) for f in folds
    }
    per_target = {
        f.family: _means([r for r in by_target if r["target"] == f.family])
        for f in target_folds
    }
    overall = _means(rows)
    return nan_to_none(
        {
            "collection": XLA_CPU.name,
            "split": METHOD,
            "validation": {
                "method": METHOD,
                "folds": len(folds),
                "families": [f.family for f in folds],
                "epochs": cfg.epochs,
                "seed": cfg.seed,
                "scored_by": "pytorch",
                "fold_seconds": {f.family: f.seconds for f in folds},
                "fixed": {
                    f.family: {
                        "options": xla_cpu2.to_options(f.fixed_row).flat(),
                        "train_geomean": round(f.fixed_train_geomean, 4),
                    }
                    for f in folds
                },
                "note": "each program ranked by a model trained with this recipe on the "
                "other families only; fixed = the best single option set on those "
                "same training families; the shipped model trained on all",
            },
            "graphs": rows,
            "families": per_family,
            "targets_left_out": per_target,
            "mean": overall["model"],
            "baselines": {b: overall[b] for b in ("default", "random", "fixed")},
        }
    )


def format_cv(report: dict[str, Any]) -> str:
    """Per family and overall: model / default / random / fixed, top-1 and top-5."""
    keys = ("top1_slowdown", "top5_slowdown")
    head = "| family | programs | " + " | ".join(
        f"{k.split('_')[0]} model / default / random / fixed" for k in keys
    )
    lines = [head + " |", "|---" * (len(keys) + 2) + "|"]
    rows = [
        *report["families"].items(),
        (
            "**mean**",
            {
                "graphs": len(report["graphs"]),
                "model": report["mean"],
                **report["baselines"],
            },
        ),
    ]
    for family, m in rows:
        cells = [
            " / ".join(
                f"{m[c][k]:.3f}" for c in ("model", "default", "random", "fixed")
            )
            for k in keys
        ]
        lines.append(f"| {family} | {m['graphs']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build(
    data: Path,
    out: Path,
    checkpoint: Path,
    runs: Path,
    cfg: TrainConfig,
    console: Console,
) -> dict[str, Any]:
    """Cross-validate, train on every program, export with the CV metrics."""
    from xla_costmodel.manifest import KnowledgeFile, sha256_file, write_manifest
    from xla_costmodel.models.checkpoint import save_checkpoint
    from xla_costmodel.models.export import export_artifact
    from xla_costmodel.models.train import fit

    programs = load_programs(data)
    if len(families(programs)) < 2:
        raise ValueError(
            f"{data}: cross-validation needs programs of 2 families or more"
        )
    start = time.monotonic()
    folds = cross_validate(programs, cfg, runs / "cv", console)
    report = cv_report(programs, folds, cfg)
    report["validation"]["seconds"] = round(time.monotonic() - start, 1)
    console.print(f"training on all {len(programs)} programs")
    start = time.monotonic()
    result = fit([p.path for p in programs], [], cfg, runs / "all", console)
    save_checkpoint(result, checkpoint)
    counts = {t: sum(p.target == t for p in programs) for t in targets_of(programs)}
    main_target = max(counts, key=lambda t: (counts[t], t))
    manifest = export_artifact(
        result, out, name="xla_cpu", version=out.name, target=main_target
    )
    report["validation"]["shipped_training_seconds"] = round(
        time.monotonic() - start, 1
    )
    seeds = write_seeds(programs, out / SEEDS_FILE)
    update = {
        "metrics": report,
        "targets": sorted(counts),
        "knowledge": KnowledgeFile(
            file=SEEDS_FILE,
            sha256=sha256_file(seeds),
            programs=counts,
            compiler=compilers(programs),
        ),
    }
    write_manifest(out, manifest.model_copy(update=update))
    return report


def run(
    data: Annotated[
        Path, typer.Option(help="The collected xla_cpu folder.")
    ] = paths.XLA_CPU_DATA,
    out: Annotated[
        Path, typer.Option(help="Artifact directory to write.")
    ] = paths.ARTIFACTS / "xla_cpu/1",
    checkpoint: Annotated[
        Path, typer.Option(help="PyTorch checkpoint folder.")
    ] = paths.CHECKPOINTS / "xla_cpu/1",
    runs: Annotated[
        Path, typer.Option(help="Epoch logs, fold models, CV cache.")
    ] = paths.RUNS / "xla_cpu",
    epochs: int = EPOCHS,
    seed: int = 0,
    json_: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON.")
    ] = False,
) -> None:
    """Cross-validate the recipe by family, then train and export the shipped model."""
    console = Console(stderr=True)
    # Relative paths keep machine paths out of the committed manifest.
    data = Path(os.path.relpath(existing(data, "--data", "xla_cpu dataset")))
    start = time.monotonic()
    report = build(data, out, checkpoint, runs, recipe_config(seed, epochs), console)
    console.print(f"{out}: done in {time.monotonic() - start:.0f} s")
    print(json.dumps(report, indent=1) if json_ else format_cv(report))


def main() -> None:
    typer.run(run)


if __name__ == "__main__":
    main()
