"""Cross-validation of the xla_cpu recipe: one model per held-out family (or target),
trained on the rest, scoring the held-out programs; cached by the data's and the
recipe's fingerprint (``xla_costmodel.models.xla_cpu_recipe`` reports it).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from xla_costmodel.models.xla_cpu_programs import (
    Program,
    families,
    fixed_row,
    targets_of,
)
from xla_costmodel.tpugraphs.reader import load_npz

if TYPE_CHECKING:
    from xla_costmodel.models.train import TrainConfig

KINDS = ("family", "target")  # what cross-validation leaves out


@dataclass
class Fold:
    """One held-out family (or target): the fixed row chosen on the training
    programs, and the fold model's scores of each held-out program's configs (lower
    = predicted faster), keyed by ``Program.key``."""

    family: str  # the held-out family, or target for kind "target"
    train: list[str]  # program keys
    fixed_row: list[float]
    fixed_train_geomean: float
    scores: dict[str, list[float]]
    seconds: float
    kind: str = "family"


def fingerprint(programs: Sequence[Program], cfg: TrainConfig) -> str:
    """Changes with any npz's bytes, any program's family, or the recipe."""
    h = hashlib.sha256(json.dumps(asdict(cfg), sort_keys=True, default=str).encode())
    for p in programs:
        h.update(f"{p.key}:{p.family}:".encode())
        h.update(hashlib.sha256(p.path.read_bytes()).digest())
    return h.hexdigest()


def run_folds(
    programs: Sequence[Program],
    cfg: TrainConfig,
    runs: Path,
    console: Console,
    kinds: Sequence[str] = KINDS,
) -> list[Fold]:
    """Train one model per family on the other families; score the held-out ones.
    Each fold's checkpoint goes to ``runs/<family>/`` (to serve it later)."""
    from xla_costmodel.models.checkpoint import save_checkpoint
    from xla_costmodel.models.train import fit, score_all

    # (kind, held-out value, the Program attribute it is compared with)
    splits: list[tuple[str, str, str]] = []
    if "family" in kinds:
        splits += [("family", f, "family") for f in families(programs)]
    if "target" in kinds and len(targets_of(programs)) > 1:
        splits += [("target", t, "target") for t in targets_of(programs)]
    folds = []
    for kind, held, attr in splits:
        start = time.monotonic()
        train = [p for p in programs if getattr(p, attr) != held]
        test = [p for p in programs if getattr(p, attr) == held]
        console.print(f"fold {kind} {held}: train {len(train)}, test {len(test)}")
        result = fit([p.path for p in train], [], cfg, runs / kind / held, console)
        save_checkpoint(result, runs / kind / held)
        scores = {
            p.key: score_all(result.model, load_npz(p.path).graph, p.configs).tolist()
            for p in test
        }
        row, geomean = fixed_row(train)
        folds.append(
            Fold(
                held,
                [p.key for p in train],
                row.tolist(),
                geomean,
                scores,
                round(time.monotonic() - start, 1),
                kind,
            )
        )
    return folds


def cross_validate(
    programs: Sequence[Program],
    cfg: TrainConfig,
    runs: Path,
    console: Console | None = None,
    reuse: bool = True,
    kinds: Sequence[str] = KINDS,
) -> list[Fold]:
    """``run_folds`` of each kind, or its cached result when the data and the recipe
    are unchanged (one cache file per kind: the kinds can run in parallel)."""
    console = console or Console(stderr=True, quiet=True)
    key = fingerprint(programs, cfg)
    folds: list[Fold] = []
    for kind in kinds:
        cache = runs / f"cv-{kind}.json"
        if reuse and cache.exists():
            cached = json.loads(cache.read_text())
            if cached.get("fingerprint") == key:
                console.print(f"cross-validation ({kind}): cached in {cache}")
                folds += [Fold(**f) for f in cached["folds"]]
                continue
        fresh = run_folds(programs, cfg, runs, console, (kind,))
        runs.mkdir(parents=True, exist_ok=True)
        cache.write_text(
            json.dumps({"fingerprint": key, "folds": [asdict(f) for f in fresh]})
        )
        folds += fresh
    return folds
