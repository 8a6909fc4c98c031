"""Limits that hold before the work they bound (the app in process, real Redis and
SQLite): npz keys judged before any member is decoded, the float32 bytes one request
may score, embeddings from Redis held to the manifest's shapes, retention of graphs
nobody measured, and database failures answered without the database's words."""

from __future__ import annotations

import io
import logging
import zipfile

import anyio
import httpx
import numpy as np
import pytest
import sqlalchemy as sa
from servicekit import NPZ, AppClient, graph_json, graph_npz, metric

from xla_costmodel.harness import free_port
from xla_costmodel.service.core import blob
from xla_costmodel.service.core.redis_store import Seal, connect, embedding_key
from xla_costmodel.service.settings import Settings
from xla_costmodel.service.store import default_sqlite_url
from xla_costmodel.service.store.schema import graphs, measurements
from xla_costmodel.tpugraphs.arrays import Sample

pytestmark = pytest.mark.anyio


def with_member(body: bytes, name: str, data: bytes) -> bytes:
    """``body`` (an npz) plus a raw member that no npy reader could decode."""
    buf = io.BytesIO(body)
    with zipfile.ZipFile(buf, "a") as archive:
        archive.writestr(name, data)
    return buf.getvalue()


async def test_npz_keys_are_judged_before_any_member_is_decoded(
    client: httpx.AsyncClient, kernel: Sample
) -> None:
    configs = np.asarray(kernel.configs[:4], np.float32)
    body = graph_npz(kernel, config_feat=configs)
    garbage = b"\x93NUMPY this is no array at all"
    # An unexpected key is named, not decoded (decoding it would be a 400).
    r = await client.post(
        "/v1/rank?model=tile",
        content=with_member(body, "evil.npy", garbage),
        headers=NPZ,
    )
    assert (r.status_code, r.json()["error"]["field"]) == (422, "evil"), r.text
    # A TpuGraphs key the service does not need is skipped without decoding it.
    r = await client.post(
        "/v1/rank?model=tile",
        content=with_member(body, "config_runtime.npy", garbage),
        headers=NPZ,
    )
    assert r.status_code == 200, r.text


async def test_the_bytes_scored_per_request_are_capped(
    make_client: AppClient, kernel: Sample
) -> None:
    client = await make_client(max_scored_bytes=4096)  # 42 tile configs as float32
    gid = (await client.put("/v1/graphs?model=tile", json=graph_json(kernel))).json()
    body = {"model": "tile", "graph_id": gid["graph_id"]}
    ok = await client.post(
        "/v1/rank", json={**body, "configs": kernel.configs[:42].tolist()}
    )
    assert ok.status_code == 200, ok.text
    r = await client.post(
        "/v1/rank", json={**body, "configs": kernel.configs[:43].tolist()}
    )
    error = r.json()["error"]
    assert (r.status_code, error["code"], error["field"]) == (
        413,
        "payload_too_large",
        "configs",
    )


async def test_an_embedding_of_the_wrong_shape_in_redis_is_a_counted_miss(
    make_client: AppClient, redis_url: str, kernel: Sample
) -> None:
    # A wrong shape under a valid seal (a bug, or an old writer with the key): the
    # shape check, not the seal, must catch it.
    sealing = "limits-shape-test-key"
    first = await make_client(redis_url=redis_url, redis_hmac_key=sealing)
    r = await first.put("/v1/graphs?model=tile", json=graph_json(kernel))
    gid = r.json()["graph_id"]
    redis = connect(redis_url, 1.0, 1.0)
    seal = Seal(Settings(redis_hmac_key=sealing).stores.redis_seal_key)
    key = embedding_key("tile", "1", gid)
    good = blob.loads(seal.open(key, await redis.get(key)))
    wrong = {"graph_embedding": np.zeros((7,), np.float32)}  # the manifest says [64]
    await redis.set(key, seal.seal(key, blob.dumps(wrong)))
    # An empty in-process cache.
    fresh = await make_client(redis_url=redis_url, redis_hmac_key=sealing)
    body = {"model": "tile", "graph_id": gid, "configs": kernel.configs[:5].tolist()}
    r = await fresh.post("/v1/rank", json=body)
    assert (r.status_code, r.json()["error"]["code"]) == (404, "graph_not_found")
    r = await fresh.post(
        "/v1/rank", json={**body, "graph_id": None, "graph": graph_json(kernel)}
    )
    assert r.status_code == 200 and r.json()["cache"] == "miss", r.text
    text = (await fresh.get("/metrics")).text
    assert metric(text, "costmodel_cache_errors_total", level="redis", op="shape") == 2
    refilled = blob.loads(seal.open(key, await redis.get(key)))  # recomputed
    assert np.array_equal(refilled["graph_embedding"], good["graph_embedding"])
    await redis.aclose()


async def test_graphs_nobody_measured_leave_the_database(
    make_client: AppClient, model_dir: object, kernel: Sample
) -> None:
    client = await make_client(graph_retention_s=1, retention_sweep_s=0.2)
    r = await client.put("/v1/graphs?model=tile", json=graph_json(kernel))
    gid = r.json()["graph_id"]
    url = default_sqlite_url(model_dir.parent / "data")  # type: ignore[attr-defined]
    engine = sa.create_engine(url)

    def kept() -> list[str]:
        with engine.connect() as conn:
            return list(conn.execute(sa.select(graphs.c.graph_id)).scalars())

    assert kept() == []  # an upload is held for feedback, never archived
    fed = {
        "model": "tile",
        "graph_id": gid,
        "configs": kernel.configs[:2].tolist(),
        "runtimes_ns": [3, 4],
    }
    r = await client.post("/v1/feedback", json=fed)
    assert r.status_code == 200, r.text
    assert kept() == [gid]  # archived with its measurements, then purged of them
    with engine.begin() as conn:
        conn.execute(sa.delete(measurements))
    with anyio.fail_after(10):
        while kept():
            await anyio.sleep(0.1)
    engine.dispose()


async def test_a_database_failure_is_named_without_the_database_url(
    make_client: AppClient, kernel: Sample, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"postgresql://writer:hunter2-secret@127.0.0.1:{free_port()}/costmodel"
    client = await make_client(database_url=url)
    caplog.set_level(logging.DEBUG)
    r = await client.post(
        "/v1/feedback",
        json={
            "model": "tile",
            "graph": graph_json(kernel),
            "configs": kernel.configs[:2].tolist(),
            "runtimes_ns": [5, 6],
        },
    )
    error = r.json()["error"]
    assert (r.status_code, error["code"]) == (503, "feedback_unavailable")
    assert "database is unavailable" in error["message"]
    for text in (r.text, caplog.text, (await client.get("/metrics")).text):
        assert "hunter2" not in text
        assert str(url.split("@")[1]) not in r.text  # nor where it lives
