"""Reading npz bytes without trusting them: no pickles, no allocation they cannot back.

``np.load`` allocates an array from its ``.npy`` header's shape before reading a byte
of data, so a few hundred bytes claiming ``(10**13,)`` float64 would ask for 80 TB.
Each member's header is read first and its size checked against what the zip says
the member holds uncompressed, which the zip reader enforces (it stops there, and
checks the CRC). Every member's name goes through ``keep`` before any member is
decoded: a caller refuses an unexpected key (by raising) or skips one it does not
need (False) without paying for its decoding. The service reads request bodies and
the client reads npz answers with this one function; each maps ``NpzError`` into
its own error tree.
"""

from __future__ import annotations

import io
import math
import zipfile
from collections.abc import Callable
from typing import IO, Any

import numpy as np


class NpzError(ValueError):
    """Not an npz of plain ``.npy`` arrays, or one whose headers lie."""


class NpzTooLarge(NpzError):
    """It would decode to more than the caller's limit."""


def read_npz(
    data: bytes, max_decoded: int, keep: Callable[[str], bool] | None = None
) -> dict[str, np.ndarray[Any, Any]]:
    """The arrays of an npz, keyed as ``np.load`` keys them (without ``.npy``):
    those ``keep`` accepts (all without one), each key judged before any decoding."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
            if keep is not None:
                members = [info for info in members if keep(_key(info))]
            decoded = sum(info.file_size for info in members)
            if decoded > max_decoded:
                raise NpzTooLarge(
                    f"npz holds {decoded} bytes uncompressed (limit {max_decoded})"
                )
            return {_key(info): _member(archive, info) for info in members}
    except NpzError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise NpzError(str(exc)) from None


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
        raise NpzError(
            f"npz member {info.filename!r} claims shape {list(shape)} of {dtype} "
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
        raise NpzError(f"unsupported .npy format version {version}")
    if dtype.hasobject:
        raise NpzError(f"object arrays are not accepted (dtype {dtype})")
    return tuple(shape), dtype
