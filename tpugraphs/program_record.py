"""A program measured on a target, as target knowledge (``knowledge.py``) sees it.

``summarize`` a graph's HLO (its opcode mix), ``record`` one program's measured rows
as a ``ProgramRecord`` (distinct configs, log runtime relative to the default, one
vote per writer), see another target's records at ``FOREIGN_TRUST`` (``foreign``),
and ``save_seeds``/``load_seeds`` an artifact's records as one npz.
Deterministic, numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

OPCODES = 256  # node_opcode is uint8
FOREIGN_TRUST = 0.3  # a program measured on another target, against one of this target


def summarize(node_opcode: npt.ArrayLike) -> F64:
    """A graph's HLO summary: its opcode histogram, square-rooted and unit-norm, so
    the dot product of two summaries is their cosine similarity (1 = same mix)."""
    ops = np.asarray(node_opcode).astype(np.int64).ravel()
    hist = np.bincount(np.clip(ops, 0, OPCODES - 1), minlength=OPCODES)
    root = np.sqrt(hist.astype(np.float64))
    norm = float(np.linalg.norm(root))
    return root / norm if norm > 0 else root


@dataclass(frozen=True)
class ProgramRecord:
    """One program measured on a target: distinct configs and their log runtime
    relative to the program's default (0 for the default itself)."""

    name: str  # a graph id, or a dataset program's name
    summary: F64  # [OPCODES]
    configs: F32  # [n, W] distinct
    rel: F64  # [n]
    measurements: int  # rows behind them (repeats included)
    # How much a program of this record's kind counts: 1 for the target's own, less
    # for one measured on another target (``FOREIGN_TRUST``: CPUs disagree).
    trust: float = 1.0
    # Who vouches for it: a writer's programs share one vote (``knowledge.py``);
    # None: a vote of its own (seeds, simulated programs), never evicted.
    voter: str | None = None
    compiler: str | None = None  # what it was measured under; None: unknown


def record(
    name: str,
    summary: F64,
    configs: npt.ArrayLike,
    runtimes_ns: npt.ArrayLike,
    default_row: npt.ArrayLike,
    trust: float = 1.0,
    writers: Sequence[str | None] | None = None,
    *,
    voter: str | None = None,
    compiler: str | None = None,
) -> ProgramRecord | None:
    """Merge repeats (median log runtime per distinct config) and express each config
    relative to the default; None when the default was never measured (nothing to be
    relative to) or nothing else was. With ``writers`` (one per row), a config's value
    is the median over writers of each writer's median: one writer's flood of rows
    is one vote, like any other writer's. ``voter``, ``compiler``: the record's."""
    flat = np.asarray(configs, np.float32)
    flat = flat.reshape(flat.shape[0], -1)
    rt = np.asarray(runtimes_ns, np.float64)
    if flat.shape[0] == 0 or flat.shape[0] != rt.shape[0] or (rt <= 0).any():
        return None
    uniq, inverse = np.unique(flat, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    logs = np.log(rt)
    who = None if writers is None else np.asarray([w or "" for w in writers])
    med = np.array(
        [
            _vote(logs[inverse == g], None if who is None else who[inverse == g])
            for g in range(len(uniq))
        ]
    )
    default = np.asarray(default_row, np.float32).ravel()
    hit = np.flatnonzero((uniq == default).all(1))
    if hit.size == 0 or len(uniq) < 2:
        return None
    rel = med - med[hit[0]]
    return ProgramRecord(
        name, summary, uniq, rel, int(rt.shape[0]), trust, voter, compiler
    )


def _vote(logs: F64, writers: npt.NDArray[np.str_] | None) -> float:
    if writers is None:
        return float(np.median(logs))
    return float(np.median([np.median(logs[writers == w]) for w in np.unique(writers)]))


def save_seeds(path: str | Path, seeds: Mapping[str, Sequence[ProgramRecord]]) -> None:
    """Write per-target records as one npz (no pickles): an artifact's seeds."""
    recs = [(t, r) for t, rs in sorted(seeds.items()) for r in rs]
    width = recs[0][1].configs.shape[1] if recs else 0
    arrays = {
        "target": np.array([t for t, _ in recs], dtype=str),
        "name": np.array([r.name for _, r in recs], dtype=str),
        "summary": np.stack([r.summary for _, r in recs])
        if recs
        else np.zeros((0, OPCODES)),
        "measurements": np.array([r.measurements for _, r in recs], np.int64),
        "trust": np.array([r.trust for _, r in recs], np.float64),
        "rows": np.array([len(r.rel) for _, r in recs], np.int64),
        "configs": np.concatenate([r.configs for _, r in recs])
        if recs
        else np.zeros((0, width), np.float32),
        "rel": np.concatenate([r.rel for _, r in recs]) if recs else np.zeros(0),
    }
    with open(path, "wb") as f:
        # numpy's stub types **kwds as its allow_pickle flag
        np.savez_compressed(f, **arrays)  # type: ignore[arg-type]


def load_seeds(path: str | Path) -> dict[str, list[ProgramRecord]]:
    """``save_seeds``' file back: target -> records."""
    with np.load(path, allow_pickle=False) as z:
        a = {k: z[k] for k in z.files}
    out: dict[str, list[ProgramRecord]] = {}
    ends = np.cumsum(a["rows"])
    starts = ends - a["rows"]
    for i, target in enumerate(a["target"].tolist()):
        span = slice(int(starts[i]), int(ends[i]))
        out.setdefault(str(target), []).append(
            ProgramRecord(
                str(a["name"][i]),
                a["summary"][i].astype(np.float64),
                a["configs"][span].astype(np.float32),
                a["rel"][span].astype(np.float64),
                int(a["measurements"][i]),
                float(a["trust"][i]),
            )
        )
    return out


def foreign(records: Sequence[ProgramRecord], target: str) -> list[ProgramRecord]:
    """Another target's records as this one sees them: at ``FOREIGN_TRUST``, named
    ``target/name`` (a program may be measured on both)."""
    return [
        replace(r, name=f"{target}/{r.name}", trust=r.trust * FOREIGN_TRUST)
        for r in records
    ]
