"""Embeddings as bytes for Redis: a small header naming each array, then raw bytes.

Layout (version 1)::

    b"CMEMB1\\n"                       magic
    uint32 little-endian               length of the JSON header
    JSON header                        {"arrays": [{"name", "dtype", "shape"}, ...]}
    the arrays' bytes, C order, in header order

Only little-endian float32 arrays are written or accepted; nothing is pickled.
``check_shapes`` holds a decoded one to the artifact's declared outputs: Redis is
shared, so a value written by another version of the code (or by anyone who can
reach Redis) must not reach the scorer with a shape it was not exported for.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from xla_costmodel.runner import Embedding

MAGIC = b"CMEMB1\n"
_DTYPE = "<f4"
_LEN = struct.Struct("<I")
_MAX_HEADER = 64 * 1024


class BlobError(ValueError):
    """Bytes that are not an embedding blob (corrupt, truncated, or another format)."""


def dumps(embedding: Embedding) -> bytes:
    """Serialise named float32 arrays."""
    arrays = {
        name: np.ascontiguousarray(a, dtype=_DTYPE) for name, a in embedding.items()
    }
    header = json.dumps(
        {
            "arrays": [
                {"name": n, "dtype": _DTYPE, "shape": list(a.shape)}
                for n, a in arrays.items()
            ]
        },
        separators=(",", ":"),
    ).encode()
    parts = [MAGIC, _LEN.pack(len(header)), header]
    parts.extend(a.tobytes() for a in arrays.values())
    return b"".join(parts)


def loads(blob: bytes) -> Embedding:
    """Parse a blob written by ``dumps``; raises BlobError on anything else."""
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + _LEN.size:
        raise BlobError("not an embedding blob")
    offset = len(MAGIC) + _LEN.size
    (size,) = _LEN.unpack_from(blob, len(MAGIC))
    if size > _MAX_HEADER or offset + size > len(blob):
        raise BlobError("truncated header")
    try:
        entries = json.loads(blob[offset : offset + size])["arrays"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BlobError(f"bad header: {exc}") from None
    offset += size
    out: Embedding = {}
    for entry in entries:
        name, shape = _entry(entry)
        count = int(np.prod(shape, dtype=np.int64))
        end = offset + 4 * count
        if end > len(blob):
            raise BlobError(f"truncated array {name!r}")
        out[name] = np.frombuffer(
            blob, dtype=_DTYPE, count=count, offset=offset
        ).reshape(shape)
        offset = end
    if offset != len(blob):
        raise BlobError("trailing bytes")
    return out


def check_shapes(
    embedding: Embedding, shapes: Mapping[str, Sequence[int | str]]
) -> None:
    """BlobError unless every array has its declared rank and fixed dims, and each
    symbolic dim (``num_configurable``) one size across the arrays."""
    bound: dict[str, int] = {}
    for name, dims in shapes.items():
        got = embedding[name].shape
        if len(got) != len(dims):
            raise BlobError(f"{name!r} has shape {list(got)}, declared {list(dims)}")
        for want, size in zip(dims, got, strict=True):
            if isinstance(want, str):
                want = bound.setdefault(want, size)
            if want != size:
                raise BlobError(
                    f"{name!r} has shape {list(got)}, declared {list(dims)}"
                )


def _entry(entry: Any) -> tuple[str, tuple[int, ...]]:
    try:
        name, dtype, shape = entry["name"], entry["dtype"], entry["shape"]
    except (KeyError, TypeError):
        raise BlobError("bad array entry") from None
    if not isinstance(name, str) or dtype != _DTYPE or not isinstance(shape, list):
        raise BlobError("bad array entry")
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise BlobError(f"bad shape for {name!r}")
    return name, tuple(shape)
