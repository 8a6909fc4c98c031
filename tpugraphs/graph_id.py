"""The canonical graph id: a sha256 any client can compute without the service.

Encoding (version 1), fed to sha256 in this order:

    b"costmodel-graph-v1\\n"
    for each present key of (node_feat <f4, node_opcode |u1, edge_index <i8,
                             node_config_ids <i8)    # the last for layout graphs only
        key + "\\n"
        dtype string + "\\n"                          # "<f4", "|u1", "<i8"
        shape as comma-separated decimals + "\\n"     # e.g. "3163,140"
        the array's bytes, C order, in that dtype

node_splits is not part of the id: encoders do not read it. Inputs are canonicalised
before hashing: an empty ``edge_index`` of any shape (``[]``) is hashed as shape ``0,2``,
and integer arrays whose values do not fit the canonical dtype exactly (opcodes outside
0-255, non-integral or non-finite floats) are refused with ``ValueError`` rather than
wrapped or truncated into another graph's id.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

GRAPH_ID_PREFIX = b"costmodel-graph-v1\n"
CANONICAL_DTYPES = (
    ("node_feat", "<f4"),
    ("node_opcode", "|u1"),
    ("edge_index", "<i8"),
    ("node_config_ids", "<i8"),
)


def graph_id(
    node_feat: Any,
    node_opcode: Any,
    edge_index: Any,
    node_config_ids: Any | None = None,
) -> str:
    """Hex sha256 of the canonical encoding above."""
    values = {
        "node_feat": node_feat,
        "node_opcode": node_opcode,
        "edge_index": edge_index,
        "node_config_ids": node_config_ids,
    }
    h = hashlib.sha256(GRAPH_ID_PREFIX)
    for key, dtype in CANONICAL_DTYPES:
        value = values[key]
        if value is None:
            continue
        arr = _canonical(key, value, np.dtype(dtype))
        h.update(f"{key}\n{dtype}\n{','.join(map(str, arr.shape))}\n".encode())
        h.update(arr.data)
    return h.hexdigest()


def _canonical(key: str, value: Any, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """``value`` as a C-ordered array of ``dtype``; no copy when it already is one (its
    buffer is hashed in place: ``tobytes`` would copy 12.9 MB for a big graph)."""
    arr = np.asarray(value)
    if key == "edge_index" and arr.size == 0:
        arr = arr.reshape(0, 2)
    if dtype.kind in "iu" and arr.dtype != dtype and arr.size:
        if arr.dtype.kind not in "biuf":
            raise ValueError(f"{key}: expected integers, got dtype {arr.dtype}")
        if arr.dtype.kind == "f" and not (
            np.isfinite(arr).all() and (arr == np.round(arr)).all()
        ):
            raise ValueError(f"{key}: values must be integers")
        info = np.iinfo(dtype)
        if arr.min() < info.min or arr.max() > info.max:
            raise ValueError(f"{key}: values must lie in [{info.min}, {info.max}]")
    return np.ascontiguousarray(arr, dtype=dtype)
