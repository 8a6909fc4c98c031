"""Rank answers, JSON and npz, are checked against the contract without a Python loop
per element, and anything else is a ``ProtocolError``."""

from __future__ import annotations

import io
import zipfile
from typing import Any

import httpx
import numpy as np
import pytest
from numpy.lib import format as npy

from xla_costmodel.clients import ProtocolError
from xla_costmodel.clients.wire import parse_rank

GID = "ab" * 32
REQUEST = httpx.Request("POST", "http://service/v1/rank")


def json_answer(**changes: Any) -> httpx.Response:
    body = {
        "model": "tile",
        "model_version": "1",
        "graph_id": GID,
        "cache": "memory",
        "ranking": [2, 0, 1],
        "scores": [0.5, 0.75, 0.25],
        "top_k": [2],
    }
    body.update(changes)
    return httpx.Response(200, json=body, request=REQUEST)


def npz_answer(headers: dict[str, str] | None = None, **changes: Any) -> httpx.Response:
    arrays = {
        "ranking": np.array([2, 0, 1], np.int64),
        "scores": np.array([0.5, 0.75, 0.25], np.float32),
        "top_k": np.array([2], np.int64),
    }
    arrays.update(changes)
    buf = io.BytesIO()
    np.savez(buf, **{k: v for k, v in arrays.items() if v is not None})
    head = {
        "Content-Type": "application/x-npz",
        "X-Model": "tile",
        "X-Model-Version": "1",
        "X-Cache": "memory",
        "X-Graph-ID": GID,
    }
    head.update(headers or {})
    return httpx.Response(200, content=buf.getvalue(), headers=head, request=REQUEST)


@pytest.mark.parametrize("answer", [json_answer, npz_answer])
def test_both_encodings_give_the_same_result(answer: Any) -> None:
    result = parse_rank(answer(), GID, 3, uploaded=True)
    assert (result.ranking, result.top_k, result.scores) == (
        (2, 0, 1),
        (2,),
        (0.5, 0.75, 0.25),
    )
    assert (result.model, result.model_version, result.cache) == ("tile", "1", "memory")
    assert result.graph_id == GID and result.uploaded
    assert all(type(i) is int for i in result.ranking + result.top_k)
    assert all(type(s) is float for s in result.scores or ())


def test_a_json_answer_without_top_k_repeats_the_ranking() -> None:
    response = json_answer()
    body = response.json()
    del body["top_k"]
    result = parse_rank(
        httpx.Response(200, json=body, request=REQUEST), GID, 3, uploaded=False
    )
    assert result.top_k == result.ranking == (2, 0, 1)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"ranking": [2, 0, 0]}, "permutation"),
        ({"ranking": [2, 0, 3]}, "permutation"),
        ({"ranking": [2, 0, -1]}, "permutation"),
        ({"ranking": [2, 0]}, "permutation"),
        ({"ranking": [2, 0, True]}, "list of integers"),
        ({"ranking": [2.0, 0, 1]}, "list of integers"),
        ({"ranking": [2, 0, 2**70]}, "list of integers"),
        ({"ranking": "201"}, "list of integers"),
        ({"top_k": [None]}, "list of integers"),
        ({"scores": [0.5, 0.75]}, "one entry per config"),
        ({"scores": [0.5, "x", 0.25]}, "list of numbers"),
        ({"scores": [0.5, [1], 0.25]}, "list of numbers"),
        ({"scores": None}, "list of numbers"),
        ({"cache": "disk"}, "cache tier"),
        ({"graph_id": "cd" * 32}, "not " + GID),
    ],
)
def test_json_answers_breaking_the_contract(
    changes: dict[str, Any], match: str
) -> None:
    with pytest.raises(ProtocolError, match=match):
        parse_rank(json_answer(**changes), GID, 3, uploaded=False)


@pytest.mark.parametrize(
    ("headers", "changes", "match"),
    [
        ({}, {"ranking": np.array([2, 0, 0])}, "permutation"),
        ({}, {"ranking": np.array([2, 0, 5])}, "permutation"),
        ({}, {"ranking": np.array([2.0, 0.0, 1.0])}, "1-d numeric"),
        ({}, {"ranking": np.array([[2, 0, 1]])}, "1-d numeric"),
        ({}, {"top_k": np.array(["2"])}, "1-d numeric"),
        ({}, {"scores": np.array([1, 2, 3])}, "1-d numeric"),
        ({}, {"scores": np.zeros(2, np.float32)}, "one entry per config"),
        ({}, {"top_k": None}, "not an npz"),
        ({"X-Cache": "disk"}, {}, "cache tier"),
        ({"X-Graph-ID": "cd" * 32}, {}, "not " + GID),
    ],
)
def test_npz_answers_breaking_the_contract(
    headers: dict[str, str], changes: dict[str, Any], match: str
) -> None:
    with pytest.raises(ProtocolError, match=match):
        parse_rank(npz_answer(headers, **changes), GID, 3, uploaded=False)


def test_an_unreadable_npz_answer() -> None:
    garbage = httpx.Response(
        200,
        content=b"PK\x03\x04 not a zip",
        headers={"Content-Type": "application/x-npz"},
        request=REQUEST,
    )
    with pytest.raises(ProtocolError, match="not an npz"):
        parse_rank(garbage, GID, 3, uploaded=False)


@pytest.mark.parametrize("version", [(1, 0), (2, 0)])
def test_an_npz_answer_whose_header_lies_is_a_protocol_error(
    version: tuple[int, int],
) -> None:
    """np.load allocates the header's shape before reading: MemoryError escaped."""
    head = io.BytesIO()
    header = {"descr": "<f8", "fortran_order": False, "shape": (10**13,)}
    write = (
        npy.write_array_header_1_0 if version == (1, 0) else npy.write_array_header_2_0
    )
    write(head, header)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("ranking.npy", head.getvalue() + b"\0" * 64)
    lying = httpx.Response(
        200,
        content=buf.getvalue(),
        headers={"Content-Type": "application/x-npz"},
        request=REQUEST,
    )
    with pytest.raises(ProtocolError, match="claims shape"):
        parse_rank(lying, GID, 3, uploaded=False)


def test_an_npz_answer_of_object_arrays_is_a_protocol_error() -> None:
    buf = io.BytesIO()
    np.savez(buf, ranking=np.array([{"a": 1}], dtype=object))
    answer = httpx.Response(
        200,
        content=buf.getvalue(),
        headers={"Content-Type": "application/x-npz"},
        request=REQUEST,
    )
    with pytest.raises(ProtocolError, match="object"):
        parse_rank(answer, GID, 3, uploaded=False)
