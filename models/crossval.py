"""Cross-validation by kernel: every graph scored by a model that never saw it.

With a handful of labelled tile kernels a single hold-out is one or two kernels and says
little (and, chosen by hash, it can hold out most of the labelled configs). Instead
``kernel_folds`` splits the rankable graphs into folds by graph id (all files of one
graph together; leave-one-out by default); each fold trains ``xla_costmodel.models.train.fit`` on
every file of the other graphs (graphs with < 2 distinct configs included: they only
feed the statistics) for a fixed number of epochs, with no validation set and so no
early stopping, and scores its held-out graphs.

Rows follow ``xla_costmodel.models.evaluate``: the file's raw configs (no de-duplication), the model's
metrics, the exact random baseline and, where the files mark it (tile, xla_cpu), the
compiler default. Scores come from
PyTorch (``score_all``); the exported ONNX graphs match them to ~1e-4.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from xla_costmodel.models.data import name_hash
from xla_costmodel.models.train import TrainConfig, fit, score_all
from xla_costmodel.tpugraphs.collections import get
from xla_costmodel.tpugraphs.metrics import mean_metrics
from xla_costmodel.tpugraphs.reader import file_graph, load_npz

Fold = tuple[list[Path], list[Path]]


def kernel_folds(
    files: Sequence[Path],
    rankable: Sequence[Path],
    k: int | None = None,
    graphs: Mapping[Path, str] | None = None,
) -> list[Fold]:
    """(train, test) per fold. Test sets partition ``rankable`` (each graph is tested
    exactly once); a fold trains on every file outside its test set. Files map to
    graphs by ``graphs`` (graph id; default: each path its own graph): the files of one
    graph are tested together, and a fold trains on no file of its test graphs.
    ``k`` None: leave-one-graph-out. Otherwise graphs go round-robin, in sha256(file
    name) order, to ``k`` folds, so the split depends neither on the file order nor on
    the machine."""

    def graph(path: Path) -> str:
        return graphs.get(path, str(path)) if graphs else str(path)

    members: dict[str, list[Path]] = {}
    for p in dict.fromkeys(rankable):
        members.setdefault(graph(p), []).append(p)
    ranked = sorted(members, key=lambda g: (min(map(name_hash, members[g])), g))
    n = len(ranked) if k is None else min(k, len(ranked))
    if n < 2:
        raise ValueError("cross-validation needs at least 2 rankable graphs")
    folds = []
    for held in (set(ranked[i::n]) for i in range(n)):
        test = sorted(p for g in held for p in members[g])
        folds.append(([f for f in files if graph(f) not in held], test))
    return folds


def score_row(model: Any, path: Path) -> dict[str, Any]:
    """One held-out graph: model metrics and baselines on the file's raw configs."""
    sample = load_npz(path)
    spec = get(model.cfg.collection)
    targets = sample.targets()
    scores = score_all(model, sample.graph, sample.configs)
    row: dict[str, Any] = {
        "graph": path.stem,
        "num_configs": sample.num_configs,
        **spec.metrics(scores, targets),
        "random": spec.metrics.random_baseline(targets),
    }
    if spec.default_is_normalizer:
        row["default"] = spec.default_baseline(targets)
    return row


def cross_validate(
    files: Sequence[Path],
    rankable: Sequence[Path],
    cfg: TrainConfig,
    log_dir: Path,
    k: int | None = None,
    console: Console | None = None,
) -> dict[str, Any]:
    """Train one model per fold and score its held-out graphs; the report's rows are
    in file order, with their mean and the baselines' means on the same graphs."""
    console = console or Console(stderr=True, quiet=True)
    rows: dict[Path, dict[str, Any]] = {}
    graphs = {p: file_graph(p)[0] for p in dict.fromkeys([*files, *rankable])}
    folds = kernel_folds(files, rankable, k, graphs)
    for i, (train, test) in enumerate(folds):
        result = fit(train, [], replace(cfg), log_dir / f"fold{i}", console)
        rows.update((path, score_row(result.model, path)) for path in test)
    ordered = [rows[p] for p in files if p in rows]
    spec = get(cfg.collection)
    keys = spec.metrics.keys
    baselines = {"random": mean_metrics([r["random"] for r in ordered], keys)}
    if spec.default_is_normalizer:
        baselines["default"] = mean_metrics([r["default"] for r in ordered], keys)
    return {
        "method": "leave-one-kernel-out"
        if k is None
        else f"{len(folds)}-fold-by-kernel",
        "folds": len(folds),
        "epochs": cfg.epochs,
        "seed": cfg.seed,
        "scored_by": "pytorch",
        "graphs": ordered,
        "mean": mean_metrics(ordered, keys),
        "baselines": baselines,
    }


def format_rows(report: dict[str, Any]) -> str:
    """Per-graph markdown table: model | random | default, for each metric."""
    keys = [k for k in report["mean"]]
    head = "| graph | C | " + " | ".join(f"{k} (model/rand/def)" for k in keys) + " |"
    lines = [head, "|---" * (len(keys) + 2) + "|"]
    for row in [
        *report["graphs"],
        {
            "graph": "**mean**",
            "num_configs": "",
            **report["mean"],
            **report["baselines"],
        },
    ]:
        cells = []
        for key in keys:
            vals = [
                row.get(key),
                row.get("random", {}).get(key),
                row.get("default", {}).get(key),
            ]
            cells.append(" / ".join("-" if v is None else f"{v:.3f}" for v in vals))
        lines.append(
            f"| {row['graph']} | {row['num_configs']} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def main() -> None:
    """``python -m xla_costmodel.models.crossval COLLECTION PATH...``: leave-one-kernel-out, default config."""
    from xla_costmodel.models.data import collection_files, iter_examples
    from xla_costmodel.models.network import ModelConfig

    collection = sys.argv[1]
    files = collection_files(sys.argv[2:], collection)  # type: ignore[arg-type]
    rankable = [Path(ex.name) for ex in iter_examples(files, collection) if ex.rankable]  # type: ignore[arg-type]
    cfg = TrainConfig(collection, model=ModelConfig(collection))  # type: ignore[arg-type]
    report = cross_validate(files, rankable, cfg, Path("runs/crossval"))
    print(format_rows(report))
    print(json.dumps(report["mean"]))


if __name__ == "__main__":
    main()
