"""Untrusted npz bodies: headers checked before allocating, decoding off the loop."""

from __future__ import annotations

import io
import threading
import zipfile
from typing import Any

import httpx
import numpy as np
import pytest
from numpy.lib import format as npy
from servicekit import NPZ, graph_npz

import xla_costmodel.service.codecs
import xla_costmodel.service.core.ranker
from xla_costmodel.service.codecs import Params, decode_upload, prefers_npz
from xla_costmodel.service.codecs import load_npz as read_npz
from xla_costmodel.service.core.inputs import INLINE_BYTES, RawGraph
from xla_costmodel.service.errors import MalformedBody, PayloadTooLarge
from xla_costmodel.tpugraphs import npz as tpugraphs_npz
from xla_costmodel.tpugraphs.arrays import Sample

pytestmark = pytest.mark.anyio


def npy_member(shape: tuple[int, ...], version: tuple[int, int] = (1, 0)) -> bytes:
    """A ``.npy`` header claiming ``shape`` of float64, then only 64 bytes of data."""
    head = io.BytesIO()
    header = {"descr": "<f8", "fortran_order": False, "shape": shape}
    if version == (1, 0):
        npy.write_array_header_1_0(head, header)
    else:
        npy.write_array_header_2_0(head, header)
    return head.getvalue() + b"\0" * 64


def zipped(**members: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(f"{name}.npy", data)
    return buf.getvalue()


@pytest.mark.parametrize("version", [(1, 0), (2, 0)])
@pytest.mark.parametrize("shape", [(10**8,), (10**13,), (10**7, 10**7)])
def test_a_header_claiming_more_than_the_member_holds_is_refused(
    version: tuple[int, int], shape: tuple[int, ...]
) -> None:
    """np.load would allocate the claimed size first: MemoryError, then a 500."""
    with pytest.raises(MalformedBody, match="claims shape"):
        read_npz(zipped(config_feat=npy_member(shape, version)), 1 << 20)


def test_honest_members_of_both_header_versions_load() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3))
    v2 = io.BytesIO()
    npy.write_array(v2, b, version=(2, 0))
    one = io.BytesIO()
    np.save(one, a)
    got = read_npz(zipped(a=one.getvalue(), b=v2.getvalue()), 1 << 20)
    assert np.array_equal(got["a"], a) and got["a"].dtype == np.float32
    assert np.array_equal(got["b"], b)


def test_object_arrays_and_size_limits() -> None:
    buf = io.BytesIO()
    np.savez(buf, x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(MalformedBody, match="object"):
        read_npz(buf.getvalue(), 1 << 20)
    buf = io.BytesIO()
    np.savez_compressed(buf, x=np.zeros(1 << 16))
    with pytest.raises(PayloadTooLarge):
        read_npz(buf.getvalue(), 1 << 16)


async def test_a_lying_header_is_a_400_not_a_500(client: httpx.AsyncClient) -> None:
    body = zipped(config_feat=npy_member((10**13,)))
    r = await client.post(
        f"/v1/rank?model=tile&graph_id={'0' * 64}", content=body, headers=NPZ
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "malformed_body"


def test_an_npz_graph_is_sized_by_its_decoded_arrays(kernel: Sample) -> None:
    body = graph_npz(kernel)
    upload = decode_upload(body, NPZ["content-type"], Params(model="tile"), 1 << 30)
    assert isinstance(upload.graph, RawGraph)
    g = kernel.graph
    decoded = g.node_feat.nbytes + g.node_opcode.nbytes + g.edge_index.nbytes
    assert upload.graph.nbytes == decoded != len(body)


async def test_npz_bodies_are_decoded_off_the_event_loop(
    client: httpx.AsyncClient, kernel: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even a small one: 1 KB of deflate can hold a megabyte of zeros."""
    threads: list[bool] = []

    def spy(body: bytes, max_decoded: int, keep: Any = None) -> dict[str, Any]:
        threads.append(threading.current_thread() is threading.main_thread())
        return tpugraphs_npz.read_npz(body, max_decoded, keep)

    monkeypatch.setattr(xla_costmodel.service.codecs, "read_npz", spy)
    body = graph_npz(kernel)
    assert len(body) < INLINE_BYTES
    r = await client.put("/v1/graphs?model=tile", content=body, headers=NPZ)
    assert r.status_code == 200, r.text
    assert threads == [False]


async def test_json_configs_reach_the_loop_as_an_array(
    client: httpx.AsyncClient, kernel: Sample, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The nested lists are converted while decoding (off the loop for large
    bodies), so ``check_configs`` on the loop makes no pass over the values."""
    seen: list[tuple[type, bool]] = []
    check = xla_costmodel.service.core.ranker.check_configs

    def spy(value: Any, *args: Any) -> Any:
        on_loop = threading.current_thread() is threading.main_thread()
        seen.append((type(value), on_loop))
        return check(value, *args)

    monkeypatch.setattr(xla_costmodel.service.core.ranker, "check_configs", spy)
    configs = np.zeros((20_000, 24)).tolist()  # ~1 MB of JSON
    g = kernel.graph
    graph = {
        "node_feat": g.node_feat.tolist(),
        "node_opcode": g.node_opcode.tolist(),
        "edge_index": g.edge_index.tolist(),
    }
    r = await client.post(
        "/v1/rank", json={"model": "tile", "graph": graph, "configs": configs}
    )
    assert r.status_code == 200, r.text
    assert seen == [(np.ndarray, True)]


@pytest.mark.parametrize(
    ("accept", "npz"),
    [
        ("application/x-npz", True),
        ("Application/X-NPZ", True),
        ("application/json, application/x-npz", True),
        ("application/x-npz;q=0.9, */*;q=0.1", True),
        (None, False),
        ("", False),
        ("*/*", False),
        ("application/json", False),
        ("application/json, application/x-npz;q=0", False),
        ("application/x-npz; q=0", False),
        ("application/x-npz;q=0.5, application/json", False),
        ("application/x-npz-ish", False),
    ],
)
def test_accept_negotiation(accept: str | None, npz: bool) -> None:
    assert prefers_npz(accept) is npz


async def test_accept_is_parsed_on_the_route(
    client: httpx.AsyncClient, kernel: Sample
) -> None:
    body = graph_npz(kernel, config_feat=np.zeros((3, 24), np.float32))
    for accept, want in [
        ("Application/X-NPZ", "application/x-npz"),
        ("application/json, application/x-npz;q=0", "application/json"),
    ]:
        r = await client.post(
            "/v1/rank?model=tile", content=body, headers={**NPZ, "accept": accept}
        )
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == want, accept
