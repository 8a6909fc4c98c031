"""Reading an npz answer without trusting it: no pickles, no allocation it cannot back.

``np.load`` allocates an array from its ``.npy`` header's shape before reading its
data, so a few hundred bytes claiming ``(10**13,)`` float64 would raise MemoryError
(or take the host's memory). Each member's header is checked first against what the
zip says the member holds uncompressed, which the zip reader enforces. The service
has its twin in ``service.npz``: the client may not import the service.
"""

from __future__ import annotations

import io
import math
import zipfile
from typing import IO, Any

import numpy as np

from clients.errors import ProtocolError

# A rank answer for 100k configs is ~2 MB; this leaves room for far larger batches.
MAX_DECODED_BYTES = 1 << 30


def read_npz(
    data: bytes, max_decoded: int = MAX_DECODED_BYTES
) -> dict[str, np.ndarray[Any, Any]]:
    """The arrays of an npz, keyed as ``np.load`` keys them; ``ProtocolError`` for
    anything but plain ``.npy`` arrays that decode to at most ``max_decoded`` bytes."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
            decoded = sum(info.file_size for info in members)
            if decoded > max_decoded:
                raise ValueError(f"{decoded} bytes uncompressed (limit {max_decoded})")
            return {_key(info): _member(archive, info) for info in members}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise ProtocolError(f"not a readable npz ({exc})") from None


def _key(info: zipfile.ZipInfo) -> str:
    name = info.filename
    return name[:-4] if name.endswith(".npy") else name


def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray[Any, Any]:
    with archive.open(info) as fp:
        shape, dtype = _header(fp)
    claimed = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
    if claimed > info.file_size:
        raise ValueError(
            f"member {info.filename!r} claims shape {list(shape)} of {dtype} "
            f"({claimed} bytes) but holds {info.file_size} bytes"
        )
    with archive.open(info) as fp:
        return np.lib.format.read_array(fp, allow_pickle=False)


def _header(fp: IO[bytes]) -> tuple[tuple[int, ...], np.dtype[Any]]:
    version = np.lib.format.read_magic(fp)
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(fp)
    elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(fp)
    else:
        raise ValueError(f"unsupported .npy format version {version}")
    if dtype.hasobject:
        raise ValueError(f"object arrays are not accepted (dtype {dtype})")
    return tuple(shape), dtype
