"""Writing one program's measurements: TpuGraphs npz, HLO text, JSON sidecar.

Each file is written to a temporary name and renamed, and the sidecar is written
last: a program whose ``<name>.json`` exists is complete (measured or dropped), which
is what a resumed collection skips (unless asked to collect it again in another
spec: ``recorded_spec``).
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from xla_costmodel.tpugraphs.hlo.featurize import HloGraph


def sidecar_path(out: Path, name: str) -> Path:
    return out / f"{name}.json"


def is_done(out: Path, name: str) -> bool:
    return sidecar_path(out, name).is_file()


def recorded_spec(out: Path, name: str) -> str | None:
    """The config spec of the program's finished files (None: none finished)."""
    if not is_done(out, name):
        return None
    return str(json.loads(sidecar_path(out, name).read_text()).get("spec"))


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def npz_bytes(
    graph: HloGraph,
    rows: npt.NDArray[np.float32],
    runtimes_ns: npt.NDArray[np.int64],
    spec: str,
) -> bytes:
    """The xla_cpu TpuGraphs file: graph arrays, configs (rows [C, W] of ``spec``),
    runtimes, normalisers.

    Row 0 is the default config; every row's normaliser is row 0's runtime.
    """
    buf = io.BytesIO()
    np.savez(
        buf,
        node_feat=graph.node_feat,
        node_opcode=graph.node_opcode,
        edge_index=graph.edge_index,
        node_splits=graph.node_splits,
        config_feat=np.asarray(rows, np.float32),
        config_runtime=np.asarray(runtimes_ns, np.int64),
        config_runtime_normalizers=np.full(len(rows), runtimes_ns[0], np.int64),
        config_spec=np.array(spec),
    )
    return buf.getvalue()


def write_program(
    out: Path,
    name: str,
    hlo_text: str | None,
    npz: bytes | None,
    sidecar: dict[str, Any],
) -> None:
    """Write the HLO text and npz (when measured), then the sidecar."""
    out.mkdir(parents=True, exist_ok=True)
    if hlo_text is not None:
        write_atomic(out / f"{name}.hlo.txt", hlo_text.encode())
    if npz is not None:
        write_atomic(out / f"{name}.npz", npz)
    write_atomic(sidecar_path(out, name), json.dumps(sidecar, indent=1).encode())
