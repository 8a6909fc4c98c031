"""Stage 3: train a cost model on CPU with a ranking loss, then export it.

Each step takes one graph, samples up to ``batch_configs`` of its distinct configs and
applies a pairwise hinge loss (for every pair whose targets differ, the faster config
must score at least ``margin`` lower) or, with ``loss="listmle"``, ListMLE. Big graphs
get a few steps per epoch. After every
epoch the validation graphs are scored (PyTorch, on their distinct configs capped at
``max_configs`` per graph: a seeded subset that keeps the fastest, as in training) and
the epoch's line (loss + validation metrics) goes to the console and to
``train_log.jsonl``; the best epoch (by the collection's ``selection_score``: tile and
xla_cpu the mean of the top-1/5/10 slowdowns, lower is better; layout Kendall tau,
higher is better) is kept, and training stops after
``patience`` epochs without improvement. With no validation files, no rankable
validation graph (a warning), or ``early_stopping=False``, it runs every epoch and keeps
the last.

Fine-tuning (``fit(..., init=model)``, see ``xla_costmodel.models.finetune``) starts from a copy of a
trained network and keeps its normalisation statistics (its weights were learned on
them). The starting network is a candidate too, as epoch 0: early stopping keeps it
when no epoch beats it on validation, and ``epochs=0`` returns it unchanged.
"""

from __future__ import annotations

import copy
import math
import random
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from rich.console import Console

from xla_costmodel.models.checkpoint import TrainResult, save_checkpoint
from xla_costmodel.models.data import Example, ExampleStore, FeatureStats, feature_stats
from xla_costmodel.models.losses import list_mle, pairwise_hinge
from xla_costmodel.models.network import CostModel, ModelConfig
from xla_costmodel.models.train_log import fresh_log, log_epoch, progress_bar
from xla_costmodel.tpugraphs.arrays import Graph
from xla_costmodel.tpugraphs.collections import get
from xla_costmodel.tpugraphs.metrics import mean_metrics
from xla_costmodel.tpugraphs.spec import Collection


@dataclass
class TrainConfig:
    collection: Collection
    epochs: int = 30
    seed: int = 0
    lr: float = 2e-3
    weight_decay: float = 1e-5
    batch_configs: int = 64  # configs per step (all pairs among them are ranked)
    max_steps_per_graph: int = 4  # per epoch, for graphs with many configs
    # Per graph, after de-duplication; bounds memory. None: 20,000 (one row per
    # config), or 2,000 for per-node configs (layout's are [NC,18] each: up to ~1,000
    # nodes on nlp graphs).
    max_configs: int | None = None
    margin: float = 0.1
    loss: str = "hinge"  # "hinge" (pairwise, margin) or "listmle" (listwise)
    patience: int = 8
    # False: run every epoch and keep the last; validation is only logged (for a
    # fixed, pre-chosen epoch count, so the reported metrics are not selected on).
    early_stopping: bool = True
    # One intra-op thread: per-graph tensors are small, and on shared cores OpenMP's
    # spinning makes tiny ops (index_add) 100x slower than the single-threaded path.
    threads: int = 1
    model: ModelConfig = field(default_factory=lambda: ModelConfig("tile"))

    def __post_init__(self) -> None:
        if self.max_configs is None:
            self.max_configs = 2_000 if get(self.collection).per_node else 20_000


def set_seeds(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def graph_tensors(graph: Graph) -> dict[str, torch.Tensor]:
    out = {
        "node_feat": torch.from_numpy(graph.node_feat),
        "node_opcode": torch.from_numpy(graph.node_opcode.astype(np.int64)),
        "edge_index": torch.from_numpy(graph.edge_index),
    }
    if graph.node_config_ids is not None:
        out["node_config_ids"] = torch.from_numpy(graph.node_config_ids)
    return out


def ranking_loss(
    scores: torch.Tensor, targets: torch.Tensor, cfg: TrainConfig
) -> torch.Tensor:
    if cfg.loss == "listmle":
        return list_mle(scores, targets)
    return pairwise_hinge(scores, targets, cfg.margin)


def score_all(model: CostModel, graph: Graph, configs: np.ndarray) -> np.ndarray:
    """PyTorch scores for every config, in chunks (the scorer is batch-independent)."""
    chunk = max(1, 1_000_000 // max(1, int(np.prod(configs.shape[1:-1]))))
    model.eval()
    with torch.no_grad():
        emb = model.encode(graph_tensors(graph))
        parts = [
            model.scorer(*emb, torch.from_numpy(configs[i : i + chunk])).numpy()
            for i in range(0, configs.shape[0], chunk)
        ]
    return np.concatenate(parts)


def validate(model: CostModel, examples: Iterable[Example]) -> dict[str, float | None]:
    metrics = get(model.cfg.collection).metrics
    rows = [
        metrics(score_all(model, ex.graph, ex.configs), ex.targets)
        for ex in examples
        if ex.rankable
    ]
    return mean_metrics(rows, metrics.keys)


def selection_score(collection: str, metrics: dict[str, float | None]) -> float:
    """Higher is better; NaN-free so early stopping can compare epochs."""
    return get(collection).selection_score(metrics)


def install_stats(model: CostModel, stats: FeatureStats) -> None:
    def t(a: npt.ArrayLike) -> torch.Tensor:
        return torch.tensor(a, dtype=torch.float32)

    model.set_stats(
        {
            "node": (t(stats.node_mean), t(stats.node_std)),
            "config": (t(stats.config_mean), t(stats.config_std)),
        }
    )


def steps_for(ex: Example, cfg: TrainConfig) -> int:
    if not ex.rankable:
        return 0
    return min(
        cfg.max_steps_per_graph, math.ceil(int(ex.configs.shape[0]) / cfg.batch_configs)
    )


def train_epoch(
    model: CostModel,
    opt: torch.optim.Optimizer,
    examples: Iterable[Example],
    cfg: TrainConfig,
    rng: np.random.Generator,
    advance: Callable[[], None],
) -> float:
    """Graphs in the order given; each gets ``steps_for`` steps on fresh config samples."""
    model.train()
    losses = []
    for ex in examples:
        graph = graph_tensors(ex.graph)
        for _ in range(steps_for(ex, cfg)):
            k = min(cfg.batch_configs, ex.configs.shape[0])
            pick = np.sort(rng.choice(ex.configs.shape[0], k, replace=False))
            scores = model(graph, torch.from_numpy(ex.configs[pick]))
            loss = ranking_loss(scores, torch.from_numpy(ex.targets[pick]), cfg)
            opt.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            losses.append(float(loss.detach()))
            advance()
    return float(np.mean(losses)) if losses else math.nan


@dataclass
class _Scan:
    """What the statistics pass saw of the training files."""

    graphs: int = 0
    rankable: int = 0
    configs_raw: int = 0
    configs_dedup: int = 0
    steps: int = 0


def _scan_and_stats(
    store: ExampleStore, cfg: TrainConfig
) -> tuple[FeatureStats, _Scan]:
    scan = _Scan()

    def counted() -> Iterator[Example]:
        for ex in store:
            scan.graphs += 1
            if ex.rankable:
                scan.rankable += 1
                scan.configs_raw += ex.raw_configs
                scan.configs_dedup += ex.configs.shape[0]
                scan.steps += steps_for(ex, cfg)
            yield ex

    stats = feature_stats(counted(), cfg.collection)
    if not scan.rankable:
        raise ValueError("no training graph has 2 or more distinct configs")
    return stats, scan


def fit(
    train_paths: Sequence[Path],
    valid_paths: Sequence[Path],
    cfg: TrainConfig,
    log_dir: Path,
    console: Console | None = None,
    init: CostModel | None = None,
) -> TrainResult:
    """Train on ``train_paths``, select on ``valid_paths``; logs go to ``log_dir``.

    ``init``: fine-tune a copy of this network (left untouched) instead of a fresh one
    with statistics from ``train_paths``; its architecture must be ``cfg.model``.
    """
    _check_init(init, cfg)
    console = console or Console(stderr=True)
    set_seeds(cfg.seed)
    torch.set_num_threads(cfg.threads)
    start = time.monotonic()
    train_store = ExampleStore(train_paths, cfg.collection, cfg.max_configs, cfg.seed)
    valid_store = ExampleStore(valid_paths, cfg.collection, cfg.max_configs, cfg.seed)
    stats, scan = _scan_and_stats(train_store, cfg)
    model, opt = _initial_model(cfg, stats, init)
    rng = np.random.default_rng(cfg.seed)
    log_path = fresh_log(log_dir)
    valid = valid_store if valid_paths else None  # None: no validation files
    selecting = _selecting(cfg, valid, console)
    best: _Best | None = None
    epoch, loss = 0, math.nan
    if init is not None or cfg.epochs == 0:
        metrics, score = _judge(model, valid, cfg.collection, selecting, 0)
        best = (score, 0, copy.deepcopy(model.state_dict()), metrics)
        log_epoch(log_path, console, 0, None, metrics, True, 0.0)
    with progress_bar(console) as progress:
        task = progress.add_task(
            f"train {cfg.collection}", total=cfg.epochs * scan.steps
        )
        for epoch in range(1, cfg.epochs + 1):
            t0 = time.monotonic()
            epoch_data = train_store.shuffled(rng)
            loss = train_epoch(
                model, opt, epoch_data, cfg, rng, lambda: progress.advance(task)
            )
            metrics, score = _judge(model, valid, cfg.collection, selecting, epoch)
            improved = best is None or score > best[0]
            if improved:
                best = (score, epoch, copy.deepcopy(model.state_dict()), metrics)
            dt = time.monotonic() - t0
            log_epoch(log_path, progress.console, epoch, loss, metrics, improved, dt)
            if best is not None and epoch - best[1] >= cfg.patience:
                progress.console.print(f"early stop: best epoch was {best[1]}")
                break
    assert best is not None
    model.load_state_dict(best[2])
    model.eval()
    summary = _summary(
        cfg, train_paths, valid_paths, scan, epoch, best[1], selecting, start, loss
    )
    return TrainResult(model, summary, best[3])


# The selected epoch: (score, epoch, network weights, validation metrics).
_Best = tuple[float, int, dict[str, Any], dict[str, float | None]]


def _check_init(init: CostModel | None, cfg: TrainConfig) -> None:
    if init is not None and init.cfg != cfg.model:
        raise ValueError(
            f"init network is {init.cfg.to_dict()}, the config asks for "
            f"{cfg.model.to_dict()}"
        )


def _judge(
    model: CostModel,
    valid: ExampleStore | None,
    collection: str,
    selecting: bool,
    fallback: int,
) -> tuple[dict[str, float | None], float]:
    """Validation metrics and the selection score (``fallback`` when not selecting)."""
    metrics = validate(model, valid) if valid is not None else {}
    score = selection_score(collection, metrics) if selecting else fallback
    return metrics, score


def _initial_model(
    cfg: TrainConfig, stats: FeatureStats, init: CostModel | None
) -> tuple[CostModel, torch.optim.Optimizer]:
    """A fresh network with the training set's statistics, or a copy of ``init``;
    and its optimizer."""
    if init is not None:
        model = copy.deepcopy(init)
    else:
        model = CostModel(cfg.model)
        install_stats(model, stats)
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay
    )
    return model, opt


def _selecting(cfg: TrainConfig, valid: ExampleStore | None, console: Console) -> bool:
    """Whether epochs are selected on validation; warns when nothing can be."""
    if valid is None or not cfg.early_stopping:
        return False
    if any(ex.rankable for ex in valid):
        return True
    message = (
        "no validation graph has 2 or more distinct configs: nothing to "
        "select on, so early stopping is off (every epoch runs, the last "
        "is kept)"
    )
    # stacklevel 3: the warning points at fit's caller
    warnings.warn(message, stacklevel=3)
    console.print(f"[yellow]warning:[/] {message}")
    return False


def _summary(
    cfg: TrainConfig,
    train_paths: Sequence[Path],
    valid_paths: Sequence[Path],
    scan: _Scan,
    epoch: int,
    best_epoch: int,
    selecting: bool,
    start: float,
    loss: float,
) -> dict[str, Any]:
    """The training summary the manifest records."""
    return {
        "collection": cfg.collection,
        "data_files": [str(p) for p in train_paths],
        "valid_files": [str(p) for p in valid_paths],
        "graphs": scan.rankable,
        "graphs_skipped_lt2_configs": scan.graphs - scan.rankable,
        "configs_raw": scan.configs_raw,
        "configs_after_dedup": scan.configs_dedup,
        "dedup_runtime": "mean",
        "epochs_run": epoch,
        "best_epoch": best_epoch,
        "epoch_selected_on_validation": selecting,
        "seed": cfg.seed,
        "seconds": round(time.monotonic() - start, 2),
        "loss": "list_mle"
        if cfg.loss == "listmle"
        else f"pairwise_hinge(margin={cfg.margin})",
        "final_train_loss": None if math.isnan(loss) else loss,
        "train_config": {k: v for k, v in asdict(cfg).items() if k != "model"},
        "model_config": cfg.model.to_dict(),
    }


def main() -> None:
    """``python -m xla_costmodel.models.train COLLECTION OUT_DIR PATH...`` (holds out validation files)."""
    from xla_costmodel.models.data import collection_files, holdout_split
    from xla_costmodel.models.export import export_artifact  # onnx: only when run

    collection, out = sys.argv[1], Path(sys.argv[2])
    train_paths, valid_paths = holdout_split(collection_files(sys.argv[3:], collection))  # type: ignore[arg-type]
    cfg = TrainConfig(collection, model=ModelConfig(collection))  # type: ignore[arg-type]
    result = fit(train_paths, valid_paths, cfg, out)
    save_checkpoint(result, out)
    export_artifact(result, out)


if __name__ == "__main__":
    main()
