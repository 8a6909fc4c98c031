"""The collected xla_cpu programs as the recipe sees them: loaded from the dataset's
target folders, the fixed-option-set baseline, and what their sidecars record.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from xla_costmodel.tpugraphs import machine, xla_cpu2
from xla_costmodel.tpugraphs.collections import XLA_CPU
from xla_costmodel.tpugraphs.labels import normalised_medians
from xla_costmodel.tpugraphs.reader import load_npz

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Program:
    """One collected program: its configs and runtimes, and what its sidecar says."""

    name: str
    family: str
    path: Path
    configs: F32  # [C, xla_cpu2.WIDTH], row 0 the default
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
        if not np.array_equal(sample.configs[0], xla_cpu2.default_row()):
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
