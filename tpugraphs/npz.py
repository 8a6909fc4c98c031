"""Reading npz bytes without trusting them: no pickles, no allocation they cannot back.

``np.load`` allocates an array from its ``.npy`` header's shape before reading a byte
of data, so a few hundred bytes claiming ``(10**13,)`` float64 would ask for 80 TB.
Each member's header is read first and its size checked against what the zip says
the member holds uncompressed, which the zip reader enforces (it stops there, and
checks the CRC). Every member's name goes through ``keep`` before any member is
decoded: a caller refuses an unexpected key (by raising) or skips one it does not
need (False) without paying for its decoding. Before the zip reader builds one entry
per member, the end-of-central-directory record is read (``check_directory``): an
npz holds a handful of arrays, so more than ``MAX_MEMBERS`` entries, or a central
directory larger than they could need, is refused (a 47 MB body of 1M crafted
entries cost ~1 GB of ``ZipInfo`` objects). The service reads request bodies and
the client reads npz answers with this one function; each maps ``NpzError`` into
its own error tree.
"""

from __future__ import annotations

import io
import math
import struct
import zipfile
from collections.abc import Callable
from typing import IO, Any

import numpy as np


class NpzError(ValueError):
    """Not an npz of plain ``.npy`` arrays, or one whose headers lie."""


class NpzTooLarge(NpzError):
    """It would decode to more than the caller's limit (or has too many members)."""


# TpuGraphs files hold at most ~10 arrays; rank answers 4.
MAX_MEMBERS = 64
# A central directory entry is 46 bytes plus its name, extra field and comment:
# ``np.savez`` writes names of a few dozen bytes and a zip64 extra of at most 28.
MAX_ENTRY_BYTES = 1024
_EOCD = struct.Struct("<4s4H2LH")  # end of central directory (22 bytes)
_ZIP64_LOCATOR = struct.Struct("<4sLQL")  # 20 bytes, just before the EOCD
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")  # 56 bytes


def read_npz(
    data: bytes, max_decoded: int, keep: Callable[[str], bool] | None = None
) -> dict[str, np.ndarray[Any, Any]]:
    """The arrays of an npz, keyed as ``np.load`` keys them (without ``.npy``):
    those ``keep`` accepts (all without one), each key judged before any decoding."""
    check_directory(data)
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


def check_directory(data: bytes) -> None:
    """``NpzTooLarge`` if the zip's end-of-central-directory record (zip64's when
    there is one) declares more than ``MAX_MEMBERS`` entries or a central directory
    larger than they need. The zip reader walks the directory by its size, not its
    count, so both are bounded; read before ``zipfile`` makes an object per entry."""
    at = data.rfind(b"PK\x05\x06", max(0, len(data) - _EOCD.size - 0xFFFF))
    if at < 0 or len(data) - at < _EOCD.size:
        return  # not a zip: the zip reader says so
    entries, size = _EOCD.unpack_from(data, at)[4:6]
    locator = at - _ZIP64_LOCATOR.size
    if locator >= 0 and data[locator : locator + 4] == b"PK\x06\x07":
        record = _ZIP64_LOCATOR.unpack_from(data, locator)[2]
        if 0 <= record <= len(data) - _ZIP64_EOCD.size:
            fields = _ZIP64_EOCD.unpack_from(data, record)
            if fields[0] == b"PK\x06\x06":
                entries, size = max(entries, fields[7]), max(size, fields[8])
    if entries > MAX_MEMBERS or size > MAX_MEMBERS * MAX_ENTRY_BYTES:
        raise NpzTooLarge(
            f"npz declares {entries} members in a {size}-byte directory "
            f"(at most {MAX_MEMBERS} members)"
        )


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
