"""Arrays to and from the bytes the tables hold.

A graph is one ``np.savez_compressed`` blob (read back with ``allow_pickle=False``). A
config is its raw little-endian bytes plus dtype string and shape, so int8 layout
configs stay 1 byte per value and a batch of rows decodes with one ``frombuffer``.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from xla_costmodel.service.store.errors import StoreError

NUMERIC_KINDS = "biuf"


def encode_graph(arrays: Mapping[str, np.ndarray[Any, Any]]) -> bytes:
    """The arrays as an npz; each must be numeric (no object arrays, no pickles)."""
    checked: dict[str, np.ndarray[Any, Any]] = {}
    for key, value in arrays.items():
        arr = np.asarray(value)
        if arr.dtype.kind not in NUMERIC_KINDS:
            raise ValueError(f"graph array {key!r}: expected numbers, got {arr.dtype}")
        checked[key] = arr
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **checked)  # type: ignore[arg-type]
    return buffer.getvalue()


def decode_graph(blob: bytes) -> dict[str, np.ndarray[Any, Any]]:
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise StoreError(f"stored graph arrays are unreadable: {exc}") from None


def config_dtype(configs: np.ndarray[Any, Any]) -> np.dtype[Any]:
    """The little-endian form of the configs' dtype (``<f4``, ``|i1``, ...)."""
    if configs.dtype.kind not in NUMERIC_KINDS:
        raise ValueError(f"configs: expected numbers, got dtype {configs.dtype}")
    dtype: np.dtype[Any] = configs.dtype.newbyteorder("<")
    return dtype


def encode_configs(configs: np.ndarray[Any, Any]) -> tuple[list[bytes], str, str]:
    """(bytes of each row, dtype string, row shape string) of a [C, ...] batch."""
    dtype = config_dtype(configs)
    rows = np.ascontiguousarray(configs, dtype=dtype)
    shape = ",".join(map(str, rows.shape[1:]))
    return [row.tobytes() for row in rows], dtype.str, shape


def decode_configs(
    blobs: Sequence[bytes], dtypes: Sequence[str], shapes: Sequence[str]
) -> np.ndarray[Any, Any]:
    """Rows back as float32 [N, ...]; rows of one dtype and shape decode in one go."""
    if not blobs:
        return np.zeros((0,), dtype=np.float32)
    if len(set(shapes)) != 1:
        raise StoreError(f"stored configs have different shapes: {sorted(set(shapes))}")
    shape = tuple(int(part) for part in shapes[0].split(",") if part)
    if len(set(dtypes)) == 1:
        flat = np.frombuffer(b"".join(blobs), dtype=np.dtype(dtypes[0]))
        return flat.reshape(len(blobs), *shape).astype(np.float32)
    rows = [
        np.frombuffer(blob, dtype=np.dtype(dt)).astype(np.float32)
        for blob, dt in zip(blobs, dtypes, strict=True)
    ]
    return np.stack(rows).reshape(len(blobs), *shape)
