"""The xla_cpu model: cross-validation leaving families and targets out, then the
shipped artifact.

``python -m xla_costmodel.models.xla_cpu_recipe [--data datasets/xla_cpu]
[--out models/artifacts/xla_cpu/1] [--json]`` (``make train-xla-cpu``).

The dataset holds one folder per target (CPU), each with zoo programs of a dozen
architecture families measured under the same sampled option sets
(``xla_cpu.sample``, row 0 the default). The model trains on every target pooled
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
  the default. It is the baseline to beat (``../shared/xla_cpu/NOTES.md``).

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

import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import numpy.typing as npt
import typer
from rich.console import Console

from xla_costmodel import paths
from xla_costmodel.models.evaluate import nan_to_none
from xla_costmodel.paths import existing
from xla_costmodel.tpugraphs import machine, xla_cpu
from xla_costmodel.tpugraphs.collections import XLA_CPU
from xla_costmodel.tpugraphs.labels import normalised_medians
from xla_costmodel.tpugraphs.metrics import mean_metrics
from xla_costmodel.tpugraphs.reader import load_npz

if TYPE_CHECKING:
    from xla_costmodel.models.train import TrainConfig

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
# The recipe (chosen with this same CV from a small grid, so its numbers lean
# slightly optimistic): a small net, a few epochs over ~100 configs per program.
EPOCHS = 8
HIDDEN = 32
LAYERS = 2
METHOD = "leave-families-out"
SEEDS_FILE = "knowledge.npz"
KINDS = ("family", "target")  # what cross-validation leaves out


@dataclass(frozen=True)
class Program:
    """One collected program: its configs and runtimes, and what its sidecar says."""

    name: str
    family: str
    path: Path
    configs: F32  # [C, xla_cpu.WIDTH], row 0 the default
    runtimes: F64  # [C] ns: median over rounds, each round normalised by its speed
    noise: float  # how far the default's separately compiled copies disagreed
    round_min: I64 | None  # [C, R] per-round minima (single measurements), if kept
    target: str = ""  # the CPU it was measured on (``sidecar_target``)

    @property
    def key(self) -> str:
        """Unique across targets: one program may be measured on several CPUs."""
        return f"{self.target}/{self.name}"

    def targets(self) -> F64:
        return np.asarray(self.runtimes / self.runtimes[0], np.float64)

    def row_index(self, row: F32) -> int | None:
        """Where this program measured ``row`` (None: it did not, e.g. a failed compile)."""
        hits = np.flatnonzero((self.configs == row).all(1))
        return int(hits[0]) if hits.size else None


def load_programs(data: Path) -> list[Program]:
    """Every measured program of ``data``: of each target folder in it (by target,
    then name), or of ``data`` itself when it holds sidecars."""
    folders = [
        d for d in sorted(data.iterdir()) if d.is_dir() and any(d.glob("*.json"))
    ]
    if any(data.glob("*.json")) or not folders:
        return _load_folder(data)
    return [p for d in folders for p in _load_folder(d)]


def targets_of(programs: Sequence[Program]) -> list[str]:
    return sorted({p.target for p in programs})


def _load_folder(data: Path) -> list[Program]:
    """The programs of one target's folder (sidecar status ok and an npz), by name."""
    out = []
    target = sidecar_target(data) if any(data.glob("*.json")) else ""
    for side_path in sorted(data.glob("*.json")):
        side = json.loads(side_path.read_text())
        npz = side_path.with_suffix(".npz")
        if not isinstance(side, dict) or side.get("status") != "ok" or not npz.exists():
            continue
        sample = load_npz(npz, XLA_CPU.name)
        if not np.array_equal(sample.configs[0], xla_cpu.default_row()):
            raise ValueError(f"{npz}: row 0 is not the default config")
        rounds = side.get("round_min_ns")
        round_min = np.asarray(rounds, np.int64) if rounds is not None else None
        if round_min is not None and round_min.shape[0] != sample.num_configs:
            round_min = None  # not the npz's rows: do not guess
        runtimes = sample.runtimes.astype(np.float64)
        if round_min is not None and round_min.shape[1] >= 3:
            # Every target the same way, whichever collector version wrote it.
            runtimes = normalised_medians(round_min).astype(np.float64)
        out.append(
            Program(
                side["name"],
                side["family"],
                npz,
                sample.configs,
                runtimes,
                float(side["noise"]),
                round_min,
                target,
            )
        )
    return out


def families(programs: Sequence[Program]) -> list[str]:
    return sorted({p.family for p in programs})


def fixed_row(train: Sequence[Program]) -> tuple[F32, float]:
    """The row with the lowest geometric-mean runtime/default over ``train`` (rows
    every one of them measured, matched by content; ties: the first program's
    order) and that geometric mean."""
    keys = [{row.tobytes(): i for i, row in enumerate(p.configs)} for p in train]
    common = [k for k in keys[0] if all(k in other for other in keys[1:])]
    logs = [
        np.mean(
            [np.log(p.targets()[idx[k]]) for p, idx in zip(train, keys, strict=True)]
        )
        for k in common
    ]
    best = int(np.argmin(logs))
    row = train[0].configs[keys[0][common[best]]]
    return row.copy(), float(np.exp(logs[best]))


def fixed_runtime(program: Program, row: F32) -> float:
    """The program's runtime under ``row``; the default's where it has no such row."""
    idx = program.row_index(row)
    return float(program.runtimes[0 if idx is None else idx])


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
        "fixed_is_default": bool(np.array_equal(row, xla_cpu.default_row())),
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
                        "options": xla_cpu.to_options(f.fixed_row),
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


def sidecar_target(data: Path) -> str:
    """The service ``target`` of the CPU the sidecars were measured on
    (``machine.target`` of their cpuinfo fields; all programs must agree)."""
    names = set()
    for side_path in sorted(data.glob("*.json")):
        side = json.loads(side_path.read_text())
        if isinstance(side, dict) and side.get("status") == "ok":
            m = side["machine"]
            model = m.get("cpu_model", "")
            vendor = (
                "AuthenticAMD"
                if "AMD" in model
                else "GenuineIntel"
                if "Intel" in model
                else "unknown"
            )
            info = {
                "vendor_id": vendor,
                "cpu family": str(m.get("cpu_family")),
                "model": str(m.get("cpu_model_id")),
                "flags": " ".join(m["isa_flags"]),
            }
            names.add(machine.target(info))
    if len(names) != 1:
        raise ValueError(f"the sidecars name {len(names)} CPU targets: {sorted(names)}")
    return names.pop()


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


def compilers(programs: Sequence[Program]) -> dict[str, str]:
    """Per target, the jaxlib its programs were collected with (their sidecars'
    ``versions``; several: all of them, sorted; none recorded: left out)."""
    found: dict[str, set[str]] = {}
    for p in programs:
        sidecar = p.path.with_suffix(".json")
        side = json.loads(sidecar.read_text()) if sidecar.is_file() else {}
        versions = side.get("versions", {})
        if "jaxlib" in versions:
            found.setdefault(p.target, set()).add(f"jaxlib {versions['jaxlib']}")
    return {t: " / ".join(sorted(v)) for t, v in sorted(found.items())}


def write_seeds(programs: Sequence[Program], path: Path) -> Path:
    """Every program's relative runtimes per target: the seeds of target knowledge."""
    from xla_costmodel.tpugraphs import knowledge

    seeds: dict[str, list[knowledge.ProgramRecord]] = {}
    for p in programs:
        graph = load_npz(p.path, XLA_CPU.name).graph
        rec = knowledge.record(
            p.name,
            knowledge.summarize(graph.node_opcode),
            p.configs,
            p.runtimes,
            p.configs[0],
        )
        if rec is not None:
            seeds.setdefault(p.target, []).append(rec)
    knowledge.save_seeds(path, seeds)
    return path


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
