"""What a training run writes as it goes: ``train_log.jsonl`` and the console."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

LOG_FILE = "train_log.jsonl"


def fresh_log(log_dir: Path) -> Path:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / LOG_FILE
    log_path.write_text("")
    return log_path


def log_epoch(
    log_path: Path,
    console: Console,
    epoch: int,
    loss: float | None,
    metrics: dict[str, float | None],
    improved: bool,
    seconds: float,
) -> None:
    """One JSON line in ``train_log.jsonl`` and one console line (epoch 0: the start)."""
    line = {
        "epoch": epoch,
        "loss": loss,
        "valid": metrics,
        "best": improved,
        "seconds": round(seconds, 3),
    }
    with log_path.open("a") as f:
        f.write(json.dumps(line) + "\n")
    shown = " ".join(f"{k}={v:.4g}" for k, v in metrics.items() if v is not None)
    star = " *" if improved else ""
    head = "start    " if loss is None else f"loss={loss:.4f}"
    console.print(f"epoch {epoch:3d} {head} {shown}{star}")


def progress_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
