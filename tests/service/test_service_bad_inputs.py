"""Every bad input is a 4xx in the one error shape, naming the field; never a 500."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import numpy as np
import pytest
from servicekit import NPZ, AppClient, graph_json, npz_bytes

from xla_costmodel.tpugraphs.arrays import Sample

pytestmark = pytest.mark.anyio

Case = Callable[[Sample, Sample, Sample], tuple[str, str, dict[str, Any]]]


def tile_graph(k: Sample, **change: Any) -> dict[str, Any]:
    return {**graph_json(k), **change}


def layout_graph(u: Sample, **change: Any) -> dict[str, Any]:
    return {**graph_json(u), **change}


def put_json(model: str, body: Any) -> tuple[str, str, dict[str, Any]]:
    return "PUT", f"/v1/graphs?model={model}", {"json": body}


def put_npz(model: str, **arrays: Any) -> tuple[str, str, dict[str, Any]]:
    return (
        "PUT",
        f"/v1/graphs?model={model}",
        {"content": npz_bytes(**arrays), "headers": NPZ},
    )


def rank_json(body: Any) -> tuple[str, str, dict[str, Any]]:
    return "POST", "/v1/rank", {"json": body}


def rank_npz(query: str, **arrays: Any) -> tuple[str, str, dict[str, Any]]:
    return "POST", f"/v1/rank?{query}", {"content": npz_bytes(**arrays), "headers": NPZ}


def tile_npz(k: Sample, **change: Any) -> dict[str, Any]:
    g = k.graph
    return {
        "node_feat": g.node_feat,
        "node_opcode": g.node_opcode,
        "edge_index": g.edge_index,
        **change,
    }


def tile_rank(k: Sample, **change: Any) -> dict[str, Any]:
    return {
        "model": "tile",
        "graph": graph_json(k),
        "configs": k.configs[:4].tolist(),
        **change,
    }


def layout_rank(u: Sample, **change: Any) -> dict[str, Any]:
    return {
        "model": "layout",
        "graph": graph_json(u),
        "configs": u.configs[:4].tolist(),
        **change,
    }


def nan_feat(k: Sample) -> np.ndarray:
    feat = k.graph.node_feat.copy()
    feat[0, 3] = np.nan
    return feat


async def chunked(n: int, size: int) -> AsyncIterator[bytes]:
    """A body without Content-Length: the limit must hold while reading."""
    for _ in range(n):
        yield b"x" * size


def pickled() -> bytes:
    buf = io.BytesIO()
    np.savez(buf, node_feat=np.array([{"a": 1}], dtype=object))
    return buf.getvalue()


# (name, status, code, field, request builder(tile kernel, small layout graph, unet))
CASES: list[tuple[str, int, str, str | None, Case]] = [
    (
        "node_feat width",
        422,
        "invalid_request",
        "node_feat",
        lambda k, u, b: put_json(
            "tile", tile_graph(k, node_feat=[[0.0] * 139] * k.graph.num_nodes)
        ),
    ),
    (
        "node_feat ragged",
        422,
        "invalid_request",
        "node_feat",
        lambda k, u, b: put_json("tile", tile_graph(k, node_feat=[[0.0] * 140, [0.0]])),
    ),
    (
        "node_feat strings",
        422,
        "invalid_request",
        "node_feat",
        lambda k, u, b: put_json(
            "tile", tile_graph(k, node_feat=[["a"] * 140] * k.graph.num_nodes)
        ),
    ),
    (
        "node_feat null",
        422,
        "invalid_request",
        "node_feat",
        lambda k, u, b: put_json("tile", tile_graph(k, node_feat=None)),
    ),
    (
        "node_feat NaN (npz)",
        422,
        "invalid_request",
        "node_feat",
        lambda k, u, b: put_npz("tile", **tile_npz(k, node_feat=nan_feat(k))),
    ),
    (
        "node_feat inf (npz)",
        422,
        "invalid_request",
        "node_feat",
        lambda k, u, b: put_npz(
            "tile",
            **tile_npz(
                k,
                node_feat=np.where(
                    nan_feat(k) != nan_feat(k), np.inf, k.graph.node_feat
                ),
            ),
        ),
    ),
    (
        "node_feat empty",
        422,
        "invalid_request",
        "node_feat",
        lambda k, u, b: put_json(
            "tile", tile_graph(k, node_feat=[], node_opcode=[], edge_index=[])
        ),
    ),
    (
        "node_opcode out of range",
        422,
        "invalid_request",
        "node_opcode",
        lambda k, u, b: put_json(
            "tile", tile_graph(k, node_opcode=[500] * k.graph.num_nodes)
        ),
    ),
    (
        "node_opcode fractional",
        422,
        "invalid_request",
        "node_opcode",
        lambda k, u, b: put_json(
            "tile", tile_graph(k, node_opcode=[1.5] * k.graph.num_nodes)
        ),
    ),
    (
        "node_opcode length",
        422,
        "invalid_request",
        "node_opcode",
        lambda k, u, b: put_json("tile", tile_graph(k, node_opcode=[1])),
    ),
    (
        "edge_index out of range",
        422,
        "invalid_request",
        "edge_index",
        lambda k, u, b: put_json(
            "tile", tile_graph(k, edge_index=[[0, k.graph.num_nodes]])
        ),
    ),
    (
        "edge_index negative (npz)",
        422,
        "invalid_request",
        "edge_index",
        lambda k, u, b: put_npz(
            "tile", **tile_npz(k, edge_index=np.array([[0, -1]], np.int32))
        ),
    ),
    (
        "edge_index shape",
        422,
        "invalid_request",
        "edge_index",
        lambda k, u, b: put_json("tile", tile_graph(k, edge_index=[[0, 1, 2]])),
    ),
    (
        "edge_index dtype (npz)",
        422,
        "invalid_request",
        "edge_index",
        lambda k, u, b: put_npz(
            "tile", **tile_npz(k, edge_index=np.array([["a", "b"]]))
        ),
    ),
    (
        "node_config_ids out of range",
        422,
        "invalid_request",
        "node_config_ids",
        lambda k, u, b: put_json(
            "layout", layout_graph(u, node_config_ids=[0, u.graph.num_nodes])
        ),
    ),
    (
        "node_config_ids not increasing",
        422,
        "invalid_request",
        "node_config_ids",
        lambda k, u, b: put_json("layout", layout_graph(u, node_config_ids=[5, 3])),
    ),
    (
        "node_config_ids missing for layout",
        422,
        "invalid_request",
        "node_config_ids",
        lambda k, u, b: put_json("layout", graph_json(k)),
    ),
    (
        "node_config_ids given to tile",
        422,
        "invalid_request",
        "node_config_ids",
        lambda k, u, b: put_json("tile", graph_json(u)),
    ),
    (
        "graph key missing",
        422,
        "invalid_request",
        "edge_index",
        lambda k, u, b: put_npz(
            "tile", node_feat=k.graph.node_feat, node_opcode=k.graph.node_opcode
        ),
    ),
    (
        "unknown JSON key",
        422,
        "invalid_request",
        "colour",
        lambda k, u, b: put_json("tile", tile_graph(k, colour=1)),
    ),
    (
        "unknown npz key",
        422,
        "invalid_request",
        "colour",
        lambda k, u, b: put_npz("tile", **tile_npz(k, colour=np.zeros(2))),
    ),
    (
        "model query missing",
        422,
        "invalid_request",
        "model",
        lambda k, u, b: ("PUT", "/v1/graphs", {"json": graph_json(k)}),
    ),
    (
        "unknown model (PUT)",
        404,
        "model_not_found",
        "model",
        lambda k, u, b: put_json("nope", graph_json(k)),
    ),
    (
        "malformed JSON",
        400,
        "malformed_body",
        "body",
        lambda k, u, b: (
            "PUT",
            "/v1/graphs?model=tile",
            {
                "content": b'{"node_feat": [',
                "headers": {"content-type": "application/json"},
            },
        ),
    ),
    (
        "malformed npz",
        400,
        "malformed_body",
        "body",
        lambda k, u, b: (
            "PUT",
            "/v1/graphs?model=tile",
            {"content": b"PK\x03\x04 not a zip", "headers": NPZ},
        ),
    ),
    (
        "pickled npz",
        400,
        "malformed_body",
        "body",
        lambda k, u, b: (
            "PUT",
            "/v1/graphs?model=tile",
            {"content": pickled(), "headers": NPZ},
        ),
    ),
    (
        "empty body",
        400,
        "malformed_body",
        "body",
        lambda k, u, b: (
            "PUT",
            "/v1/graphs?model=tile",
            {"content": b"", "headers": NPZ},
        ),
    ),
    (
        "unsupported media type",
        415,
        "unsupported_media_type",
        "content-type",
        lambda k, u, b: (
            "PUT",
            "/v1/graphs?model=tile",
            {"content": b"x", "headers": {"content-type": "text/plain"}},
        ),
    ),
    (
        "config width",
        422,
        "invalid_request",
        "configs",
        lambda k, u, b: rank_json(tile_rank(k, configs=[[0.0] * 18])),
    ),
    (
        "layout configurable count",
        422,
        "invalid_request",
        "configs",
        lambda k, u, b: rank_json(layout_rank(u, configs=u.configs[:2, :10].tolist())),
    ),
    (
        "layout configs to tile (npz)",
        422,
        "invalid_request",
        "node_config_feat",
        lambda k, u, b: rank_npz(
            "model=tile", **tile_npz(k), node_config_feat=u.configs[:2]
        ),
    ),
    (
        "empty configs",
        422,
        "invalid_request",
        "configs",
        lambda k, u, b: rank_json(tile_rank(k, configs=[])),
    ),
    (
        "configs strings",
        422,
        "invalid_request",
        "configs",
        lambda k, u, b: rank_json(tile_rank(k, configs=[["x"] * 24])),
    ),
    (
        "configs NaN (npz)",
        422,
        "invalid_request",
        "config_feat",
        lambda k, u, b: rank_npz(
            "model=tile", **tile_npz(k), config_feat=np.full((2, 24), np.nan)
        ),
    ),
    (
        "configs missing (npz)",
        422,
        "invalid_request",
        "config_feat",
        lambda k, u, b: rank_npz("model=tile", **tile_npz(k)),
    ),
    (
        "configs not a list",
        422,
        "invalid_request",
        "configs",
        lambda k, u, b: rank_json(tile_rank(k, configs=3)),
    ),
    (
        "inline graph bad edge",
        422,
        "invalid_request",
        "graph.edge_index",
        lambda k, u, b: rank_json(
            tile_rank(k, graph=tile_graph(k, edge_index=[[0, 10**6]]))
        ),
    ),
    (
        "inline graph bad key",
        422,
        "invalid_request",
        "graph.extra",
        lambda k, u, b: rank_json(tile_rank(k, graph=tile_graph(k, extra=1))),
    ),
    (
        "both graph and graph_id",
        422,
        "invalid_request",
        "graph_id",
        lambda k, u, b: rank_json(tile_rank(k, graph_id="a" * 64)),
    ),
    (
        "neither graph nor graph_id",
        422,
        "invalid_request",
        "graph_id",
        lambda k, u, b: rank_json({"model": "tile", "configs": [[0.0] * 24]}),
    ),
    (
        "graph_id pattern",
        422,
        "invalid_request",
        "graph_id",
        lambda k, u, b: rank_json(
            {"model": "tile", "graph_id": "XYZ", "configs": [[0.0] * 24]}
        ),
    ),
    (
        "graph_id pattern (query)",
        422,
        "invalid_request",
        "graph_id",
        lambda k, u, b: rank_npz(
            "model=tile&graph_id=xyz", config_feat=np.zeros((1, 24))
        ),
    ),
    (
        "unknown graph_id",
        404,
        "graph_not_found",
        "graph_id",
        lambda k, u, b: rank_json(
            {"model": "tile", "graph_id": "a" * 64, "configs": [[0.0] * 24]}
        ),
    ),
    (
        "unknown model (rank)",
        404,
        "model_not_found",
        "model",
        lambda k, u, b: rank_json(tile_rank(k, model="nope")),
    ),
    (
        "version not loaded",
        409,
        "model_version_not_loaded",
        "model_version",
        lambda k, u, b: rank_json(tile_rank(k, model_version="99")),
    ),
    (
        "version pattern",
        422,
        "invalid_request",
        "model_version",
        lambda k, u, b: rank_json(tile_rank(k, model_version="v1")),
    ),
    (
        "top_k zero",
        422,
        "invalid_request",
        "top_k",
        lambda k, u, b: rank_json(tile_rank(k, top_k=0)),
    ),
    (
        "top_k string",
        422,
        "invalid_request",
        "top_k",
        lambda k, u, b: rank_json(tile_rank(k, top_k="3")),
    ),
    (
        "top_k query not int",
        422,
        "invalid_request",
        "top_k",
        lambda k, u, b: rank_npz("model=tile&top_k=abc", config_feat=np.zeros((1, 24))),
    ),
    (
        "top_k too large",
        422,
        "invalid_request",
        "top_k",
        lambda k, u, b: rank_json(tile_rank(k, top_k=10**9)),
    ),
    (
        "model missing (npz rank)",
        422,
        "invalid_request",
        "model",
        lambda k, u, b: rank_npz("top_k=1", config_feat=np.zeros((1, 24))),
    ),
    (
        "query params with JSON",
        422,
        "invalid_request",
        "top_k",
        lambda k, u, b: ("POST", "/v1/rank?top_k=3", {"json": tile_rank(k)}),
    ),
    (
        "model missing (JSON rank)",
        422,
        "invalid_request",
        "model",
        lambda k, u, b: rank_json({"graph_id": "a" * 64, "configs": [[0.0] * 24]}),
    ),
    (
        "rank body is a list",
        422,
        "invalid_request",
        "body",
        lambda k, u, b: rank_json([1, 2]),
    ),
    (
        "too many configs",
        422,
        "invalid_request",
        "configs",
        lambda k, u, b: rank_json(tile_rank(k, configs=[[0.0] * 24] * 101)),
    ),
    (
        "too many nodes",
        422,
        "invalid_request",
        "node_feat",
        lambda k, u, b: put_npz(
            "layout", **tile_npz(b, node_config_ids=b.graph.node_config_ids)
        ),
    ),
    (
        "body too large (Content-Length)",
        413,
        "payload_too_large",
        "body",
        lambda k, u, b: (
            "PUT",
            "/v1/graphs?model=tile",
            {"content": b"x" * 1_200_000, "headers": NPZ},
        ),
    ),
    (
        "body too large (chunked)",
        413,
        "payload_too_large",
        "body",
        lambda k, u, b: (
            "PUT",
            "/v1/graphs?model=tile",
            {"content": chunked(3, 400_000), "headers": NPZ},
        ),
    ),
    (
        "npz decompresses too large",
        413,
        "payload_too_large",
        "body",
        lambda k, u, b: put_npz("tile", node_feat=np.zeros((6000, 140), np.float32)),
    ),
]


@pytest.fixture
async def strict_client(make_client: AppClient) -> httpx.AsyncClient:
    """Small limits, so the limit cases need only small bodies."""
    client: httpx.AsyncClient = await make_client(
        max_configs=100,
        max_nodes=3000,
        max_body_bytes=1_000_000,
        max_decoded_bytes=3_000_000,
    )
    return client


async def test_bad_inputs(
    strict_client: httpx.AsyncClient, kernel: Sample, small_layout: Sample, unet: Sample
) -> None:
    """One app for all cases (fast); each case checks status, code and field."""
    failures = []
    for name, status, code, field, build in CASES:
        method, url, kwargs = build(kernel, small_layout, unet)
        r = await strict_client.request(method, url, **kwargs)
        got = (
            r.status_code,
            *(r.json().get("error", {}).get(k) for k in ("code", "field")),
        )
        if got != (status, code, field):
            failures.append(
                f"{name}: got {got}, want {(status, code, field)}: {r.text[:200]}"
            )
        elif not r.json()["error"]["message"]:
            failures.append(f"{name}: empty message")
    assert not failures, "\n".join(failures)
    metrics = (await strict_client.get("/metrics")).text
    assert 'status="500"' not in metrics


async def test_unknown_routes_and_methods_use_the_error_shape(
    client: httpx.AsyncClient,
) -> None:
    r = await client.get("/v1/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = await client.delete("/v1/rank")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
