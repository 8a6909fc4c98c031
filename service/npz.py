"""Reading an npz body without trusting it: no pickles, no allocation it cannot back.

``np.load`` allocates an array from its ``.npy`` header's shape before reading a byte
of data, so a few hundred bytes claiming ``(10**13,)`` float64 would ask for 80 TB.
Each member's header is read first and its size checked against what the zip says
the member holds uncompressed, which the zip reader enforces (it stops there, and
checks the CRC). ``clients.npz`` is the client's twin: the client may not import
the service, and neither may import the other's errors.
"""

from __future__ import annotations

import io
import math
import zipfile
from typing import IO, Any

import numpy as np

from service.errors import MalformedBody, PayloadTooLarge


def read_npz(body: bytes, max_decoded: int) -> dict[str, np.ndarray[Any, Any]]:
    """The arrays of an npz body, keyed as ``np.load`` keys them (no ``.npy``).

    ``PayloadTooLarge`` when it would decode to more than ``max_decoded`` bytes;
    ``MalformedBody`` for anything that is not an npz of plain ``.npy`` arrays.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            members = archive.infolist()
            decoded = sum(info.file_size for info in members)
            if decoded > max_decoded:
                raise PayloadTooLarge(
                    f"npz holds {decoded} bytes uncompressed (limit {max_decoded})",
                    "body",
                )
            return {_key(info): _member(archive, info) for info in members}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise MalformedBody(f"not a readable npz archive: {exc}") from None


def _key(info: zipfile.ZipInfo) -> str:
    name = info.filename
    return name[:-4] if name.endswith(".npy") else name


def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray[Any, Any]:
    with archive.open(info) as fp:
        shape, dtype = _header(fp)
    claimed = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
    if claimed > info.file_size:
        # The header may not promise more than the member holds: np.load would
        # allocate ``claimed`` bytes first and only then find the data short.
        raise MalformedBody(
            f"npz member {info.filename!r} claims shape {list(shape)} of {dtype} "
            f"({claimed} bytes) but holds {info.file_size} bytes",
            "body",
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
