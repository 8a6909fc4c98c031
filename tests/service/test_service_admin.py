"""The admin reload endpoint, in process: auth, a good version, corrupt versions."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from servicekit import ADMIN, AppClient, graph_json

from xla_costmodel.harness import add_version
from xla_costmodel.tpugraphs.arrays import Sample

pytestmark = pytest.mark.anyio
AUTH = {"authorization": f"Bearer {ADMIN}"}


async def test_reload_needs_the_admin_token(make_client: AppClient) -> None:
    client = await make_client()
    r = await client.post("/v1/models/tile/reload")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"
    r = await client.post(
        "/v1/models/tile/reload", headers={"authorization": "Bearer nope"}
    )
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    r = await client.post(
        "/v1/models/tile/reload", headers={"authorization": f"Basic {ADMIN}"}
    )
    assert r.status_code == 401
    r = await client.post("/v1/models/nope/reload", headers=AUTH)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    disabled = await make_client(admin_token=None)
    r = await disabled.post("/v1/models/tile/reload", headers=AUTH)
    assert r.status_code == 403


async def test_reload_swaps_in_a_good_version_and_keeps_pins(
    client: httpx.AsyncClient, model_dir: Path, kernel: Sample
) -> None:
    put = await client.put("/v1/graphs?model=tile", json=graph_json(kernel))
    gid = put.json()["graph_id"]
    rank = {"model": "tile", "graph_id": gid, "configs": kernel.configs.tolist()}
    before = (await client.post("/v1/rank", json=rank)).json()
    r = await client.post("/v1/models/tile/reload", headers=AUTH)
    assert r.json() == {
        "model": "tile",
        "previous_version": "1",
        "version": "1",
        "changed": False,
        "loaded_versions": ["1"],
    }
    add_version(model_dir, "tile", "2")
    r = await client.post("/v1/models/tile/reload", headers=AUTH)
    assert r.status_code == 200 and r.json()["changed"] is True
    assert r.json()["loaded_versions"] == ["1", "2"]
    # The embedding cached under v1 is not served under v2: the client re-uploads.
    missing = await client.post("/v1/rank", json=rank)
    assert (
        missing.status_code == 404
        and missing.json()["error"]["code"] == "graph_not_found"
    )
    pinned = (await client.post("/v1/rank", json={**rank, "model_version": "1"})).json()
    assert pinned["model_version"] == "1" and pinned["ranking"] == before["ranking"]
    again = await client.put("/v1/graphs?model=tile", json=graph_json(kernel))
    assert again.json()["cached"] is False
    after = (await client.post("/v1/rank", json=rank)).json()
    assert (
        after["model_version"] == "2" and after["ranking"] == before["ranking"]
    )  # same weights
    models = (await client.get("/v1/models")).json()["models"]
    assert {m["name"]: m["version"] for m in models} == {
        "tile": "2",
        "layout": "1",
        "xla_cpu": "1",
    }
    assert (
        'costmodel_model_info{collection="tile",model="tile",version="2"} 1.0'
        in (await client.get("/metrics")).text
    )


@pytest.mark.parametrize("corrupt", ["truncate", "sha256"])
async def test_reload_of_a_corrupt_version_keeps_the_old_one(
    client: httpx.AsyncClient, model_dir: Path, kernel: Sample, corrupt: str
) -> None:
    add_version(model_dir, "tile", "2", corrupt=corrupt)
    r = await client.post("/v1/models/tile/reload", headers=AUTH)
    assert r.status_code == 409
    error = r.json()["error"]
    assert error["code"] == "reload_failed" and "tile/2" in error["message"]
    body = {
        "model": "tile",
        "graph": graph_json(kernel),
        "configs": kernel.configs.tolist(),
    }
    ok = await client.post("/v1/rank", json=body)
    assert ok.status_code == 200 and ok.json()["model_version"] == "1"
    assert (await client.get("/readyz")).status_code == 200
