"""Stage 4: evaluate an artifact directory exactly as it is served (onnxruntime).

Every labelled file of the artifact's collection is scored through
``xla_costmodel.runner.ArtifactRunner`` on its raw configs (no de-duplication: repeats are
part of the official evaluation). Graphs of a collection with official eval indices
(layout) listed in the eval_indices
JSON (``<root>/eval_indices/{xla|nlp}_{default|random}.json``, found next to the ``npz``
folder the file is in) are scored on those 1,000 configs;
other graphs on all configs. Unlabelled (test) files are skipped with a note.
Metric definitions: ``xla_costmodel.tpugraphs.metrics``.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from xla_costmodel.runner import ArtifactRunner
from xla_costmodel.tpugraphs.arrays import Sample
from xla_costmodel.tpugraphs.collections import LAYOUT, get
from xla_costmodel.tpugraphs.metrics import mean_metrics
from xla_costmodel.tpugraphs.reader import expand_paths, load_npz

T = TypeVar("T")
LAYOUT_CELLS = 2_000_000  # configs x configurable nodes scored per scorer call


def eval_indices_for(path: Path, collection: str = LAYOUT.name) -> list[int] | None:
    """Official eval config indices for ``.../layout/<source>/<search>/<split>/<g>.npz``
    (the dataset's folder of the collection is named after it)."""
    parts = path.resolve().parts
    # The "layout" right after the last "npz" (else the last "layout"): a folder named
    # layout higher up the path (e.g. a checkout under ~/layout) is not the collection.
    npz = [j for j, part in enumerate(parts) if part == "npz"]
    if npz and npz[-1] + 1 < len(parts) and parts[npz[-1] + 1] == collection:
        i = npz[-1] + 1
    elif collection in parts:
        i = len(parts) - 1 - parts[::-1].index(collection)
    else:
        return None
    if i + 2 >= len(parts):
        return None
    table = f"{parts[i + 1]}_{parts[i + 2]}.json"
    roots = [
        Path(*parts[:j]) for j in range(len(parts) - 1, 0, -1) if parts[j] == "npz"
    ]
    for root in roots:
        indices = _load_table(root / "eval_indices" / table)
        if path.stem in indices:
            return indices[path.stem]
    return None


@cache
def _load_table(path: Path) -> dict[str, list[int]]:
    return json.loads(path.read_text()) if path.is_file() else {}


def score_sample(
    runner: ArtifactRunner, sample: Sample, configs: np.ndarray
) -> np.ndarray:
    embedding = runner.encode(sample.graph)
    per_config = max(1, int(np.prod(configs.shape[1:-1])))  # NC per node, else 1
    chunk = max(1, LAYOUT_CELLS // per_config)
    parts = [
        runner.score(embedding, configs[i : i + chunk])
        for i in range(0, len(configs), chunk)
    ]
    return np.concatenate(parts)


def evaluate_sample(
    runner: ArtifactRunner, sample: Sample, path: Path
) -> dict[str, Any]:
    spec = get(runner.collection)
    indices = eval_indices_for(path, spec.name) if spec.eval_indices else None
    if indices is not None and max(indices) >= sample.num_configs:
        indices = None  # a different config set than the one the indices were made for
    pick = np.arange(sample.num_configs) if indices is None else np.asarray(indices)
    targets = sample.targets()[pick]
    scores = score_sample(runner, sample, sample.configs[pick])
    row: dict[str, Any] = {
        "graph": path.stem,
        "file": str(path),
        "num_configs": int(pick.size),
        "config_set": "all" if indices is None else "eval_indices",
        **spec.metrics(scores, targets),
        "random": spec.metrics.random_baseline(targets),
    }
    if spec.default_is_normalizer:
        assert sample.normalizers is not None
        row["default"] = spec.default_baseline(targets)  # targets: runtime / default
    return row


def evaluate_artifact(
    model_dir: Path, paths: Sequence[Path], note: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """The report: per-graph metrics, their mean, and the baselines' means."""
    runner = ArtifactRunner(model_dir)
    collection = runner.collection
    note = note or (lambda msg: print(msg, file=sys.stderr))
    rows, skipped = [], []
    for path in expand_paths(paths):
        sample = load_npz(path)
        if sample.collection != collection:
            continue
        if not sample.labelled:
            skipped.append({"file": str(path), "reason": "unlabelled (test file)"})
            note(f"skipped {path}: unlabelled (test file)")
            continue
        rows.append(evaluate_sample(runner, sample, path))
    spec = get(collection)
    keys = spec.metrics.keys
    default: dict[str, Any] = (
        mean_metrics([r["default"] for r in rows], keys)
        if spec.default_is_normalizer
        else spec.no_default_baseline()
    )
    return nan_to_none(
        {
            "collection": collection,
            "model_version": runner.version,
            "model_name": runner.name,
            "graphs": rows,
            "mean": mean_metrics(rows, keys),
            "baselines": {
                "random": mean_metrics([r["random"] for r in rows], keys),
                "default": default,
            },
            "skipped": skipped,
        }
    )


def nan_to_none(value: T) -> T:
    """JSON has no NaN: an undefined metric (tau of constant runtimes) becomes null."""
    out: Any = value
    if isinstance(value, float) and math.isnan(value):
        out = None
    elif isinstance(value, dict):
        out = {k: nan_to_none(v) for k, v in value.items()}
    elif isinstance(value, list):
        out = [nan_to_none(v) for v in value]
    return cast(T, out)  # the same shape; only NaN leaves become None


def format_table(report: dict[str, Any]) -> str:
    """Mean metrics of model vs baselines, as a markdown table."""
    keys = get(report["collection"]).metrics.keys
    cols = [
        ("model", report["mean"]),
        ("random", report["baselines"]["random"]),
        ("default", report["baselines"]["default"]),
    ]
    head = (
        f"| {report['collection']} ({len(report['graphs'])} graphs) | "
        + " | ".join(keys)
        + " |"
    )
    lines = [head, "|---" * (len(keys) + 1) + "|"]
    for label, values in cols:
        cells = ["n/a" if values.get(k) is None else f"{values[k]:.4g}" for k in keys]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    """``python -m xla_costmodel.models.evaluate ARTIFACT_DIR PATH...``."""
    report = evaluate_artifact(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
    print(format_table(report))


if __name__ == "__main__":
    main()
