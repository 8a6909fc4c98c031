"""The API in process (lifespan run) on the real artifacts and real graphs."""

from __future__ import annotations

import asyncio
import io
import itertools
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from servicekit import NPZ, UNET, AppClient, graph_json, graph_npz, metric, npz_bytes

from xla_costmodel.runner import ArtifactRunner
from xla_costmodel.service.schemas import RankOut
from xla_costmodel.tpugraphs.arrays import Sample
from xla_costmodel.tpugraphs.graph_id import graph_id

pytestmark = pytest.mark.anyio


def expected(model_dir: Path, name: str, sample: Sample, configs: Any) -> np.ndarray:
    """Scores computed directly with onnxruntime, no service in between."""
    runner = ArtifactRunner(model_dir / name / "1")
    return runner.score(runner.encode(sample.graph), np.asarray(configs, np.float32))


@pytest.mark.parametrize("encoding", ["json", "npz"])
async def test_rank_equals_onnxruntime_on_real_graphs(
    client: httpx.AsyncClient,
    model_dir: Path,
    unet: Sample,
    kernel: Sample,
    encoding: str,
) -> None:
    for name, sample in (("layout", unet), ("tile", kernel)):
        if encoding == "json":
            put = await client.put(f"/v1/graphs?model={name}", json=graph_json(sample))
        else:
            put = await client.put(
                f"/v1/graphs?model={name}", content=graph_npz(sample), headers=NPZ
            )
        assert put.status_code == 200, put.text
        g = sample.graph
        gid = graph_id(g.node_feat, g.node_opcode, g.edge_index, g.node_config_ids)
        assert put.json() == {
            "graph_id": gid,
            "nodes": g.num_nodes,
            "edges": g.num_edges,
            "configurable_nodes": g.num_configurable,
            "cached": False,
        }
        if encoding == "json":
            body = {"model": name, "graph_id": gid, "configs": sample.configs.tolist()}
            r = await client.post("/v1/rank", json=body)
        else:
            key = "config_feat" if name == "tile" else "node_config_feat"
            r = await client.post(
                f"/v1/rank?model={name}&graph_id={gid}",
                content=npz_bytes(**{key: sample.configs}),
                headers=NPZ,
            )
        assert r.status_code == 200, r.text
        out = r.json()
        want = expected(model_dir, name, sample, sample.configs)
        np.testing.assert_allclose(out["scores"], want, rtol=1e-6, atol=1e-6)
        assert out["ranking"] == np.argsort(want, kind="stable").tolist()
        assert out["top_k"] == out["ranking"]
        assert (out["model"], out["model_version"], out["cache"]) == (
            name,
            "1",
            "memory",
        )


async def test_inline_graph_top_k_and_deterministic_ties(
    client: httpx.AsyncClient, kernel: Sample
) -> None:
    configs = np.concatenate(
        [kernel.configs[:3], kernel.configs[:3]]
    )  # 0..2 tie with 3..5
    body = {
        "model": "tile",
        "graph": graph_json(kernel),
        "configs": configs.tolist(),
        "top_k": 4,
    }
    first = (await client.post("/v1/rank", json=body)).json()
    assert first["cache"] == "miss"
    scores, ranking = first["scores"], first["ranking"]
    assert scores[:3] == scores[3:]
    for a, b in itertools.pairwise(ranking):
        assert (scores[a], a) < (scores[b], b)  # ties broken by index
    assert first["top_k"] == ranking[:4]
    body["top_k"] = 1000  # more than there are configs: all of them
    again = (await client.post("/v1/rank", json=body)).json()
    assert again["cache"] == "memory" and again["top_k"] == ranking


async def test_json_answer_is_the_schema_serialized(
    client: httpx.AsyncClient, kernel: Sample
) -> None:
    """Built without ``RankOut`` validation, the answer is still exactly what the
    schema would serialize, field order included; many configs take the keyed sort."""
    rows = np.resize(kernel.configs, (3000, 24))  # ties: each row 5+ times
    body = {"model": "tile", "graph": graph_json(kernel), "configs": rows.tolist()}
    r = await client.post("/v1/rank", json=body)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert (
        RankOut.model_validate_json(r.content).model_dump_json().encode() == r.content
    )
    out = r.json()
    assert out["ranking"] == np.argsort(out["scores"], kind="stable").tolist()
    assert out["top_k"] == out["ranking"]
    body["top_k"] = 2
    assert (await client.post("/v1/rank", json=body)).json()["top_k"] == out["ranking"][
        :2
    ]


async def test_compact_dtypes_and_npz_answers(
    client: httpx.AsyncClient, unet: Sample
) -> None:
    configs = unet.configs[:200]
    as_int8 = npz_bytes(node_config_feat=configs.astype(np.int8), **_graph_arrays(unet))
    r8 = await client.post(
        "/v1/rank?model=layout&top_k=5", content=as_int8, headers=NPZ
    )
    as_f16 = npz_bytes(
        node_config_feat=configs.astype(np.float16), **_graph_arrays(unet)
    )
    accept = {**NPZ, "accept": "application/x-npz"}
    r16 = await client.post(
        "/v1/rank?model=layout&top_k=5", content=as_f16, headers=accept
    )
    assert r8.status_code == r16.status_code == 200
    assert r16.headers["content-type"] == "application/x-npz"
    assert r16.headers["x-cache"] == "memory" and r16.headers["x-model-version"] == "1"
    with np.load(io.BytesIO(r16.content)) as answer:
        assert (
            answer["ranking"].dtype == np.int64 and answer["scores"].dtype == np.float32
        )
        assert answer["ranking"].tolist() == r8.json()["ranking"]
        assert answer["top_k"].tolist() == r8.json()["top_k"]


def _graph_arrays(sample: Sample) -> dict[str, Any]:
    g = sample.graph
    return {
        "node_feat": g.node_feat,
        "node_opcode": g.node_opcode,
        "edge_index": g.edge_index,
        "node_config_ids": g.node_config_ids,
    }


async def test_concurrent_misses_encode_once(
    client: httpx.AsyncClient, unet: Sample
) -> None:
    body = graph_npz(unet)
    puts = [
        client.put("/v1/graphs?model=layout", content=body, headers=NPZ)
        for _ in range(8)
    ]
    answers = await asyncio.gather(*puts)
    assert {r.status_code for r in answers} == {200}
    assert len({r.json()["graph_id"] for r in answers}) == 1
    text = (await client.get("/metrics")).text
    assert metric(text, "costmodel_encode_duration_seconds_count", model="layout") == 1
    again = await client.put("/v1/graphs?model=layout", content=body, headers=NPZ)
    assert again.json()["cached"] is True


async def test_version_pinning(client: httpx.AsyncClient, kernel: Sample) -> None:
    body = {
        "model": "tile",
        "graph": graph_json(kernel),
        "configs": kernel.configs.tolist(),
    }
    assert (
        await client.post("/v1/rank", json={**body, "model_version": "1"})
    ).status_code == 200
    r = await client.post("/v1/rank", json={**body, "model_version": "7"})
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "model_version_not_loaded"
    assert r.json()["error"]["field"] == "model_version"


async def test_not_ready_without_artifacts(
    make_client: AppClient, tmp_path: Path
) -> None:
    client = await make_client(model_dir=tmp_path / "empty")
    for path in ("/readyz", "/v2/health/ready"):
        r = await client.get(path)
        assert r.status_code == 503 and r.headers["retry-after"]
        assert r.json()["error"]["code"] == "not_ready"
    assert (await client.get("/livez")).status_code == 200
    r = await client.post(
        "/v1/rank", json={"model": "tile", "graph_id": "a" * 64, "configs": [[0] * 24]}
    )
    assert r.status_code == 503 and r.json()["error"]["code"] == "not_ready"


async def test_in_flight_limit_answers_overloaded(
    make_client: AppClient, unet: Sample
) -> None:
    client = await make_client(max_inflight=1, inference_workers=1)
    body = graph_npz(unet)
    answers = await asyncio.gather(
        *(
            client.put("/v1/graphs?model=layout", content=body, headers=NPZ)
            for _ in range(4)
        )
    )
    codes = sorted(r.status_code for r in answers)
    assert codes[0] == 200 and 503 in codes
    refused = next(r for r in answers if r.status_code == 503)
    assert (
        refused.json()["error"]["code"] == "overloaded"
        and refused.headers["retry-after"]
    )


async def test_redis_failure_is_a_miss_not_an_error(
    make_client: AppClient, redis_server: Any, redis_url: str, kernel: Sample
) -> None:
    client = await make_client(redis_url=redis_url)
    body = {
        "model": "tile",
        "graph": graph_json(kernel),
        "configs": kernel.configs.tolist(),
    }
    assert (await client.post("/v1/rank", json=body)).json()["cache"] == "miss"
    redis_server.stop()
    try:
        r = await client.put(
            "/v1/graphs?model=tile",
            json={
                **graph_json(kernel),
                "node_feat": (kernel.graph.node_feat + 1).tolist(),
            },
        )  # a new graph: Redis is consulted and fails
        assert r.status_code == 200 and r.json()["cached"] is False
        again = await client.post("/v1/rank", json=body)
        assert again.status_code == 200 and again.json()["cache"] == "memory"
        text = (await client.get("/metrics")).text
        assert (
            metric(text, "costmodel_cache_errors_total", level="redis", op="get") >= 1
        )
    finally:
        redis_server.start()


async def test_a_raw_dataset_file_uploads_as_is(
    client: httpx.AsyncClient, shared_data: Path, unet: Sample
) -> None:
    """A TpuGraphs npz with labels and splits: the extra keys are ignored."""
    raw = (shared_data / UNET).read_bytes()
    r = await client.put("/v1/graphs?model=layout", content=raw, headers=NPZ)
    g = unet.graph
    assert r.json()["graph_id"] == graph_id(
        g.node_feat, g.node_opcode, g.edge_index, g.node_config_ids
    )
