"""The HTTP surface in process: health, OpenAPI, metrics, request ids, error shape."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from servicekit import AppClient, graph_json, metric

from xla_costmodel.service.deps import get_ranker
from xla_costmodel.tpugraphs.arrays import Sample

pytestmark = pytest.mark.anyio


async def test_health_models_and_openapi(client: httpx.AsyncClient) -> None:
    assert (await client.get("/livez")).json() == {"status": "ok"}
    assert (await client.get("/v2/health/live")).json() == {"live": True}
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    assert (await client.get("/v2/health/ready")).json() == {"ready": True}
    models = {m["name"]: m for m in (await client.get("/v1/models")).json()["models"]}
    assert models["tile"]["config_input"] == {
        "name": "config_feat",
        "dtype": "float32",
        "shape": ["num_configs", 24],
    }
    assert (
        models["layout"]["collection"] == "layout"
        and models["layout"]["version"] == "1"
    )
    assert [i["name"] for i in models["layout"]["graph_inputs"]][
        -1
    ] == "node_config_ids"
    spec = (await client.get("/openapi.json")).json()
    rank = spec["paths"]["/v1/rank"]["post"]
    assert set(rank["requestBody"]["content"]) == {
        "application/json",
        "application/x-npz",
    }
    assert rank["responses"]["422"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorOut"
    }
    assert {"GraphIn", "RankIn", "RankOut", "GraphOut", "ErrorOut"} <= set(
        spec["components"]["schemas"]
    )
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    for path in ("/v1/rank", "/v1/graphs", "/v1/models/{name}/reload"):
        (op,) = spec["paths"][path].values()
        assert {"422", "404"} <= set(op["responses"]), path


async def test_metrics_request_id_and_logs(
    client: httpx.AsyncClient, kernel: Sample, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="service.access")
    body = {
        "model": "tile",
        "graph": graph_json(kernel),
        "configs": kernel.configs.tolist(),
    }
    r = await client.post("/v1/rank", json=body, headers={"x-request-id": "req-42"})
    assert r.headers["x-request-id"] == "req-42"
    generated = (await client.get("/livez")).headers["x-request-id"]
    assert len(generated) == 32
    assert any(getattr(rec, "route", None) == "/v1/rank" for rec in caplog.records)
    text = (await client.get("/metrics")).text
    n = kernel.num_configs
    assert metric(text, "costmodel_configs_ranked_total", model="tile") == n
    assert metric(text, "costmodel_rank_batch_size_count", model="tile") == 1
    assert metric(text, "costmodel_score_duration_seconds_count", model="tile") == 1
    labels = {"route": "/v1/rank", "method": "POST", "model": "tile"}
    assert metric(text, "costmodel_request_duration_seconds_count", **labels) == 1
    assert metric(text, "costmodel_cache_misses_total", level="memory") >= 1
    assert (
        metric(
            text,
            "costmodel_model_info",
            model="layout",
            version="1",
            collection="layout",
        )
        == 1
    )
    assert metric(text, "costmodel_inflight_requests") == 1  # this /metrics request


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


async def test_openapi_refs_resolve(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    names = set(spec["components"]["schemas"])
    refs = _refs(spec)
    assert refs and all(r.startswith("#/components/schemas/") for r in refs)
    assert {r.rsplit("/", 1)[1] for r in refs} <= names
    assert (await client.get("/docs")).status_code == 200


async def test_unexpected_errors_keep_the_error_shape(
    make_client: AppClient, kernel: Sample
) -> None:
    class Broken:
        async def rank(self, req: Any) -> Any:
            raise RuntimeError("bug")

    client = await make_client(dependency_overrides={get_ranker: Broken})
    body = {"model": "tile", "graph": graph_json(kernel), "configs": [[0.0] * 24]}
    r = await client.post("/v1/rank", json=body, headers={"x-request-id": "oops-1"})
    assert r.status_code == 500 and r.headers["x-request-id"] == "oops-1"
    assert r.json() == {
        "error": {"code": "internal", "message": "internal error", "field": None}
    }


async def test_invented_model_names_make_no_new_metric_series(
    client: httpx.AsyncClient, kernel: Sample
) -> None:
    """Routes label requests before the name is checked; a client must not be able
    to grow the label set (and the /metrics page) by inventing names."""
    for i in range(3):
        await client.post(
            "/v1/rank",
            json={"model": f"bogus{i}", "graph_id": "0" * 64, "configs": [[0.0] * 24]},
        )
        await client.put(f"/v1/graphs?model=junk{i}", json=graph_json(kernel))
    text = (await client.get("/metrics")).text
    assert "bogus" not in text and "junk" not in text
    labels = {"route": "/v1/rank", "method": "POST", "model": "unknown"}
    assert metric(text, "costmodel_request_duration_seconds_count", **labels) == 3
    r = await client.put("/v1/graphs?model=tile", json=graph_json(kernel))
    assert r.status_code == 200
    text = (await client.get("/metrics")).text
    labels = {"route": "/v1/graphs", "method": "PUT", "model": "tile"}
    assert metric(text, "costmodel_request_duration_seconds_count", **labels) == 1
