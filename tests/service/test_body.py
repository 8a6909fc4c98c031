"""Which request bodies are decoded on the event loop: small JSON, and small npz
archives whose members are all stored (their size bounds their decoded size); a
compressed member, or anything that looks like one, sends the body to a thread."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest

from xla_costmodel.clients.payloads import savez_bytes
from xla_costmodel.service.body import _stored_only, parse
from xla_costmodel.service.schemas import NPZ_MEDIA_TYPE

pytestmark = pytest.mark.anyio
CONFIGS = np.arange(24, dtype=np.float32).reshape(1, 24)


def compressed(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def test_stored_archives_are_told_from_compressed_ones() -> None:
    assert _stored_only(savez_bytes({"config_feat": CONFIGS}))
    assert not _stored_only(compressed(config_feat=CONFIGS))
    # A stored member whose bytes look like a central entry of a compressed member.
    lookalike = np.frombuffer(b"PK\x01\x02" + b"\x00" * 6 + b"\x08\x00", np.uint8)
    assert not _stored_only(savez_bytes({"config_feat": lookalike}))


async def where_decoded(body: bytes, content_type: str) -> str:
    def decode(_: bytes, __: str | None) -> str:
        return threading.current_thread().name

    return await parse(decode, body, content_type)


async def test_a_small_stored_npz_is_decoded_on_the_loop() -> None:
    loop = threading.current_thread().name
    stored = savez_bytes({"config_feat": CONFIGS})
    assert await where_decoded(stored, NPZ_MEDIA_TYPE) == loop
    assert await where_decoded(b"{}", "application/json") == loop
    packed = compressed(config_feat=CONFIGS)
    assert await where_decoded(packed, NPZ_MEDIA_TYPE) != loop
    big = savez_bytes({"config_feat": np.zeros((4000, 24), np.float32)})  # 384 KB
    assert await where_decoded(big, NPZ_MEDIA_TYPE) != loop
