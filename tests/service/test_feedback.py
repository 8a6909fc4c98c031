"""POST /v1/feedback: rows in the measurement database, online quality gauges,
idempotent resends, graphs sent inline, every refusal, and database outages."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import sqlalchemy as sa
from servicekit import NPZ, AppClient, graph_json, metric

from xla_costmodel.service.core.feedback import OnlineQuality, Quality, compact, measure
from xla_costmodel.service.store import default_sqlite_url
from xla_costmodel.service.store.schema import graphs, measurements
from xla_costmodel.tpugraphs.arrays import Sample
from xla_costmodel.tpugraphs.graph_id import graph_id
from xla_costmodel.tpugraphs.metrics import kendall_tau, topk_slowdown

pytestmark = pytest.mark.anyio
TAU = "costmodel_online_kendall_tau"
SLOWDOWN = "costmodel_online_top1_slowdown"
STORED = "costmodel_feedback_measurements_total"


@pytest.fixture
def db_url(model_dir: Path) -> str:
    """The SQLite file the in-process app uses (``make_settings``: data_dir)."""
    return default_sqlite_url(model_dir.parent / "data")


@pytest.fixture
async def fb(make_client: AppClient) -> httpx.AsyncClient:
    return await make_client()  # type: ignore[no-any-return]


def rows(url: str) -> list[dict[str, Any]]:
    """Every stored measurement, in id order, with its config decoded."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:
            found = conn.execute(sa.select(measurements).order_by(measurements.c.id))
            out = [dict(r._mapping) for r in found]
    except sa.exc.OperationalError:  # no database file yet: nothing stored
        return []
    finally:
        engine.dispose()
    for row in out:
        shape = tuple(int(x) for x in row["config_shape"].split(","))
        row["config"] = np.frombuffer(row["config"], row["config_dtype"]).reshape(shape)
    return out


def stored_graph_ids(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [r[0] for r in conn.execute(sa.select(graphs.c.graph_id))]
    finally:
        engine.dispose()


async def upload(client: httpx.AsyncClient, model: str, sample: Sample) -> str:
    r = await client.put(f"/v1/graphs?model={model}", json=graph_json(sample))
    assert r.status_code == 200, r.text
    return str(r.json()["graph_id"])


async def rank(
    client: httpx.AsyncClient, model: str, gid: str, configs: np.ndarray, **extra: Any
) -> np.ndarray:
    return np.asarray(
        (await rank_answer(client, model, gid, configs, **extra))["scores"]
    )


async def rank_answer(
    client: httpx.AsyncClient, model: str, gid: str, configs: np.ndarray, **extra: Any
) -> dict[str, Any]:
    body = {"model": model, "graph_id": gid, "configs": configs.tolist(), **extra}
    r = await client.post("/v1/rank", json=body)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


@pytest.mark.parametrize("model", ["tile", "layout"])
async def test_a_stored_measurement_round_trips(
    fb: httpx.AsyncClient,
    db_url: str,
    kernel: Sample,
    small_layout: Sample,
    model: str,
) -> None:
    sample = kernel if model == "tile" else small_layout
    gid = await upload(fb, model, sample)
    assert stored_graph_ids(db_url) == []  # held for feedback, never archived
    configs = sample.configs[:6]
    scores = await rank(fb, model, gid, configs, adapt=False)
    runtimes = [int(r) for r in np.arange(6) * 7 + 100]
    body = {
        "model": model,
        "graph_id": gid,
        "configs": configs.tolist(),
        "runtimes_ns": runtimes,
    }
    r = await fb.post("/v1/feedback", json=body, headers={"x-request-id": "fb-1"})
    assert r.status_code == 200, r.text
    assert stored_graph_ids(db_url) == [gid]  # archived with its measurements
    answer = r.json()
    want = measure(scores, runtimes)
    assert answer == {
        "stored": 6,
        "model": model,
        "model_version": "1",
        "graph_id": gid,
        "target": "tpu-v3",
        "kendall_tau": pytest.approx(want.kendall_tau),
        "top1_slowdown": pytest.approx(want.top1_slowdown),
    }
    stored = rows(db_url)
    assert len(stored) == 6
    for i, row in enumerate(stored):
        assert (row["model"], row["model_version"], row["collection"]) == (
            model,
            "1",
            model,
        )
        assert (row["target"], row["graph_id"], row["source"]) == (
            "tpu-v3",
            gid,
            "feedback",
        )
        assert row["request_id"] == "fb-1" and row["runtime_ns"] == runtimes[i]
        assert np.array_equal(row["config"], configs[i])
        assert row["config"].dtype.kind == "i"  # integral features kept compact
        assert row["score"] == pytest.approx(scores[i], rel=1e-6)
        assert row["time"].tzinfo is not None


def test_compact_keeps_values_exactly() -> None:
    small = np.array([[0, 5, -1]], np.float32)
    assert compact(small).dtype == np.int8
    assert compact(np.array([[576.0]], np.float32)).dtype == np.int16
    for kept in ([[0.5]], [[1e20]], [[float("nan")]]):
        arr = np.array(kept, np.float32)
        out = compact(arr)
        assert out.dtype == np.float32
        assert np.array_equal(out, arr, equal_nan=True)


def test_measure_uses_the_training_metrics_and_skips_undefined_values() -> None:
    scores, runtimes = [0.3, 0.1, 0.2, 0.4], [30, 25, 10, 40]
    q = measure(scores, runtimes)
    assert q.kendall_tau == pytest.approx(kendall_tau(scores, runtimes))
    assert q.top1_slowdown == pytest.approx(topk_slowdown(scores, runtimes, 1))
    assert q.top1_slowdown == pytest.approx(1.5)  # picked 25 ns, best is 10 ns
    assert measure([0.1, 0.2], [5, 5]) == measure([0.1], [5]) == Quality(None, None)
    online = OnlineQuality()
    assert online.add("tile", "1", Quality(1.0, 0.0)) == Quality(1.0, 0.0)
    assert online.add("tile", "1", Quality(None, None)) == Quality(1.0, 0.0)
    assert online.add("tile", "1", Quality(-1.0, 2.0)) == Quality(0.0, 1.0)
    assert online.add("tile", "2", Quality(None, None)) == Quality(None, None)


async def test_gauges_follow_the_models_own_order(
    fb: httpx.AsyncClient, kernel: Sample
) -> None:
    gid = await upload(fb, "tile", kernel)
    scores = await rank(fb, "tile", gid, kernel.configs)
    distinct = np.unique(scores, return_index=True)[1][:8]  # 8 configs, no tied scores
    configs, order = kernel.configs[distinct], np.argsort(scores[distinct])
    runtimes = np.empty(8, np.int64)
    runtimes[order] = np.arange(1, 9) * 1000  # the model's order exactly
    answers = []
    for measured in (runtimes, 9000 - runtimes, [5] * 8):
        body = {
            "model": "tile",
            "graph_id": gid,
            "configs": configs.tolist(),
            "runtimes_ns": [int(x) for x in measured],
        }
        r = await fb.post("/v1/feedback", json=body)
        assert r.status_code == 200, r.text
        text = (await fb.get("/metrics")).text
        labels = {"model": "tile", "version": "1"}
        answers.append(
            (
                r.json()["kendall_tau"],
                r.json()["top1_slowdown"],
                metric(text, TAU, **labels),
                metric(text, SLOWDOWN, **labels),
                metric(text, STORED, model="tile"),
            )
        )
    assert answers[0] == (1.0, 0.0, 1.0, 0.0, 8)
    assert answers[1] == (
        -1.0,
        7.0,
        0.0,
        3.5,
        16,
    )  # reversed: picked 8000 ns, best 1000
    assert answers[2] == (None, None, 0.0, 3.5, 24)  # equal runtimes: means unchanged


async def test_config_indices_name_the_ranking_they_index(
    make_client: AppClient, db_url: str, kernel: Sample
) -> None:
    fb = await make_client()
    gid = await upload(fb, "tile", kernel)
    body = {
        "model": "tile",
        "graph_id": gid,
        "config_indices": [3, 0, 3],
        "runtimes_ns": [30, 10, 31],
    }
    r = await fb.post("/v1/feedback", json=body)  # which answer do they index?
    assert (r.status_code, r.json()["error"]["field"]) == (422, "ranking_id")
    r = await fb.post("/v1/feedback", json={**body, "ranking_id": "0" * 32})
    assert r.status_code == 409 and r.json()["error"]["code"] == "ranking_not_found"
    assert r.json()["error"]["field"] == "ranking_id"
    first = kernel.configs[:50]
    answer = await rank_answer(fb, "tile", gid, first)
    later = await rank_answer(fb, "tile", gid, kernel.configs[100:110])
    assert answer["ranking_id"] != later["ranking_id"]
    # Ranked again since (another tuner, say): the indices still mean the first batch.
    sent = {**body, "model_version": "1", "ranking_id": answer["ranking_id"]}
    r = await fb.post("/v1/feedback", json=sent)
    assert r.status_code == 200 and r.json()["stored"] == 3, r.text
    stored = rows(db_url)
    assert np.array_equal(np.stack([x["config"] for x in stored]), first[[3, 0, 3]])
    scores = np.asarray(answer["scores"])[[3, 0, 3]]
    assert [x["score"] for x in stored] == pytest.approx(scores.tolist())
    r = await fb.post(
        "/v1/feedback",
        json={**sent, "config_indices": [0, 10, 1], "ranking_id": later["ranking_id"]},
    )
    assert (r.status_code, r.json()["error"]["field"]) == (422, "config_indices[1]")
    # The memory is bounded: with no room, nothing is remembered.
    small = await make_client(recent_rankings_bytes=0)
    await upload(small, "tile", kernel)
    kept = await rank_answer(small, "tile", gid, first)
    r = await small.post(
        "/v1/feedback", json={**body, "ranking_id": kept["ranking_id"]}
    )
    assert r.status_code == 409 and r.json()["error"]["code"] == "ranking_not_found"


Build = Callable[[str, str], dict[str, Any]]  # (tile graph id, layout graph id)


def body(gid: str | None, **change: Any) -> dict[str, Any]:
    """A JSON feedback body (NaN allowed, as some clients send it); None drops a key."""
    base = {
        "model": "tile",
        "graph_id": gid,
        "configs": [[1] * 24] * 2,
        "runtimes_ns": [10, 20],
    }
    fields = {k: v for k, v in {**base, **change}.items() if v is not None}
    return {"content": json.dumps(fields), "headers": JSON}


JSON = {"content-type": "application/json"}
RID = "ab" * 16  # replaced by the id of the tile ranking test_bad_inputs makes
# (name, status, code, field, request builder)
CASES: list[tuple[str, int, str, str | None, Build]] = [
    (
        "tile width",
        422,
        "invalid_request",
        "configs",
        lambda t, u: body(t, configs=[[1] * 23] * 2),
    ),
    (
        "layout width",
        422,
        "invalid_request",
        "configs",
        lambda t, u: body(u, model="layout", configs=[[[1] * 17] * 38] * 2),
    ),
    (
        "ragged",
        422,
        "invalid_request",
        "configs",
        lambda t, u: body(t, configs=[[1] * 24, [1]]),
    ),
    (
        "NaN",
        422,
        "invalid_request",
        "configs",
        lambda t, u: body(t, configs=[[float("nan")] * 24] * 2),
    ),
    (
        "zero runtime",
        422,
        "invalid_request",
        "runtimes_ns[1]",
        lambda t, u: body(t, runtimes_ns=[5, 0]),
    ),
    (
        "negative runtime",
        422,
        "invalid_request",
        "runtimes_ns[0]",
        lambda t, u: body(t, runtimes_ns=[-5, 1]),
    ),
    (
        "huge runtime",
        422,
        "invalid_request",
        "runtimes_ns[0]",
        lambda t, u: body(t, runtimes_ns=[2**63, 1]),
    ),
    (
        "float runtime",
        422,
        "invalid_request",
        "runtimes_ns",
        lambda t, u: body(t, runtimes_ns=[1.5, 2]),
    ),
    (
        "no runtimes",
        422,
        "invalid_request",
        "runtimes_ns",
        lambda t, u: body(t, runtimes_ns=[]),
    ),
    (
        "length mismatch",
        422,
        "invalid_request",
        "runtimes_ns",
        lambda t, u: body(t, runtimes_ns=[1]),
    ),
    (
        "both",
        422,
        "invalid_request",
        "configs",
        lambda t, u: body(t, config_indices=[0, 1], ranking_id=RID),
    ),
    (
        "indices without ranking_id",
        422,
        "invalid_request",
        "ranking_id",
        lambda t, u: body(t, configs=None, config_indices=[0, 1]),
    ),
    (
        "ranking_id without indices",
        422,
        "invalid_request",
        "ranking_id",
        lambda t, u: body(t, ranking_id=RID),
    ),
    (
        "bad ranking_id",
        422,
        "invalid_request",
        "ranking_id",
        lambda t, u: body(t, configs=None, config_indices=[0, 1], ranking_id="x"),
    ),
    ("neither", 422, "invalid_request", "configs", lambda t, u: body(t, configs=None)),
    (
        "negative index",
        422,
        "invalid_request",
        "config_indices[0]",
        lambda t, u: body(t, configs=None, config_indices=[-1, 0], ranking_id=RID),
    ),
    (
        "index too big",
        422,
        "invalid_request",
        "config_indices[1]",
        lambda t, u: body(t, configs=None, config_indices=[0, 2], ranking_id=RID),
    ),
    (
        "bool index",
        422,
        "invalid_request",
        "config_indices",
        lambda t, u: body(t, configs=None, config_indices=[True, 0], ranking_id=RID),
    ),
    ("extra key", 422, "invalid_request", "top_k", lambda t, u: body(t, top_k=1)),
    ("bad graph_id", 422, "invalid_request", "graph_id", lambda t, u: body("abc")),
    ("unknown graph", 404, "graph_not_found", "graph_id", lambda t, u: body("0" * 64)),
    (
        "id and graph",
        422,
        "invalid_request",
        "graph_id",
        lambda t, u: body(
            t, graph={"node_feat": [[0.0] * 140], "node_opcode": [1], "edge_index": []}
        ),
    ),
    (
        "bad inline graph",
        422,
        "invalid_request",
        "graph.node_opcode",
        lambda t, u: body(
            None,
            graph={"node_feat": [[0.0] * 140], "node_opcode": [999], "edge_index": []},
        ),
    ),
    (
        "bad target",
        422,
        "invalid_request",
        "target",
        lambda t, u: body(t, target="cpu x"),
    ),
    (
        "bad idempotency key",
        422,
        "invalid_request",
        "Idempotency-Key",
        lambda t, u: {**body(t), "headers": {**JSON, "Idempotency-Key": "a b"}},
    ),
    (
        "unknown model",
        404,
        "model_not_found",
        "model",
        lambda t, u: body(t, model="nope"),
    ),
    (
        "version not loaded",
        409,
        "model_version_not_loaded",
        "model_version",
        lambda t, u: body(t, model_version="99"),
    ),
    (
        "never ranked",
        409,
        "ranking_not_found",
        "ranking_id",
        lambda t, u: body(
            u, model="layout", configs=None, config_indices=[0, 1], ranking_id=RID
        ),
    ),
    (
        "malformed",
        400,
        "malformed_body",
        "body",
        lambda t, u: {"content": b"{", "headers": JSON},
    ),
    (
        "npz",
        415,
        "unsupported_media_type",
        "content-type",
        lambda t, u: {"content": b"PK", "headers": NPZ},
    ),
]


async def test_bad_inputs(
    fb: httpx.AsyncClient, db_url: str, kernel: Sample, small_layout: Sample
) -> None:
    """One app for all cases; each checks status, code and field; nothing is stored."""
    tile, layout = (
        await upload(fb, "tile", kernel),
        await upload(fb, "layout", small_layout),
    )
    rid = (await rank_answer(fb, "tile", tile, kernel.configs[:2]))["ranking_id"]
    failures = []
    for name, status, code, field, build in CASES:
        request = build(tile, layout)
        if name != "never ranked" and isinstance(request["content"], str):
            request["content"] = request["content"].replace(RID, rid)
        r = await fb.post("/v1/feedback", **request)
        err = r.json().get("error", {})
        if (r.status_code, err.get("code"), err.get("field")) != (status, code, field):
            failures.append(f"{name}: {r.status_code} {r.text[:200]}")
    assert not failures, "\n".join(failures)
    assert rows(db_url) == []
    metrics = (await fb.get("/metrics")).text
    assert metric(metrics, STORED, model="tile") == 0 and 'status="500"' not in metrics


async def test_a_resend_with_the_same_idempotency_key_is_stored_once(
    fb: httpx.AsyncClient, db_url: str, kernel: Sample
) -> None:
    gid = await upload(fb, "tile", kernel)
    payload = body(gid, configs=kernel.configs[:2].tolist(), runtimes_ns=[10, 20])
    keyed = {**payload["headers"], "Idempotency-Key": "tuner-7/round-1"}
    first = await fb.post("/v1/feedback", content=payload["content"], headers=keyed)
    again = await fb.post("/v1/feedback", content=payload["content"], headers=keyed)
    assert first.status_code == again.status_code == 200, again.text
    assert again.json() == first.json()
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"
    assert len(rows(db_url)) == 2
    assert metric((await fb.get("/metrics")).text, STORED, model="tile") == 2
    # The same key for another request is a client bug: refused, nothing stored.
    other = body(gid, configs=kernel.configs[:2].tolist(), runtimes_ns=[10, 21])
    r = await fb.post("/v1/feedback", content=other["content"], headers=keyed)
    assert r.status_code == 422 and r.json()["error"] == {
        "code": "idempotency_key_reused",
        "field": "Idempotency-Key",
        "message": r.json()["error"]["message"],
    }
    # Concurrent resends (a client retrying over a slow link) are stored once too.
    raced = {**payload["headers"], "Idempotency-Key": "race"}
    answers = await asyncio.gather(
        *(
            fb.post("/v1/feedback", content=payload["content"], headers=raced)
            for _ in range(6)
        )
    )
    assert {r.status_code for r in answers} == {200}
    assert len(rows(db_url)) == 4
    # Without a key, every request is a new measurement.
    for _ in range(2):
        r = await fb.post("/v1/feedback", **payload)
        assert r.status_code == 200
    assert len(rows(db_url)) == 8


async def test_feedback_carries_an_unseen_graph_inline(
    fb: httpx.AsyncClient, db_url: str, small_layout: Sample
) -> None:
    configs = small_layout.configs[:3]
    by_id = {"model": "layout", "configs": configs.tolist(), "runtimes_ns": [3, 2, 1]}
    g = small_layout.graph
    gid = graph_id(g.node_feat, g.node_opcode, g.edge_index, g.node_config_ids)
    r = await fb.post("/v1/feedback", json={**by_id, "graph_id": gid})
    assert r.status_code == 404 and r.json()["error"]["code"] == "graph_not_found"
    r = await fb.post("/v1/feedback", json={**by_id, "graph": graph_json(small_layout)})
    assert r.status_code == 200, r.text
    assert r.json()["graph_id"] == gid and r.json()["stored"] == 3
    assert stored_graph_ids(db_url) == [gid]
    assert [x["runtime_ns"] for x in rows(db_url)] == [3, 2, 1]


async def test_a_replica_that_never_saw_the_graph_takes_its_feedback(
    make_client: AppClient, db_url: str, kernel: Sample, redis_url: str
) -> None:
    """Two apps on one database and one Redis: the second finds the graph the
    first holds in Redis (an upload never writes the database)."""
    first = await make_client(redis_url=redis_url)
    gid = await upload(first, "tile", kernel)
    second = await make_client(redis_url=redis_url)
    payload = {
        "model": "tile",
        "graph_id": gid,
        "runtimes_ns": [5, 6],
        "configs": kernel.configs[:2].tolist(),
    }
    r = await second.post("/v1/feedback", json=payload)
    assert r.status_code == 200, r.text
    assert len(rows(db_url)) == 2


async def test_database_down_is_503_then_the_resend_is_stored(
    make_client: AppClient, tmp_path: Path, kernel: Sample
) -> None:
    """A data directory that cannot hold the database: feedback is refused with
    Retry-After, nothing is counted, ranking goes on with the prior; once the
    database can be opened, the client's resend is stored."""
    data = tmp_path / "blocked"
    data.write_text("a file where the data directory should be")
    fb = await make_client(data_dir=data)
    gid = await upload(fb, "tile", kernel)  # ranks fine without the database
    scores = await rank(fb, "tile", gid, kernel.configs[:4])
    assert scores.shape == (4,)
    payload = {
        "model": "tile",
        "graph_id": gid,
        "runtimes_ns": [10, 20],
        "configs": kernel.configs[:2].tolist(),
    }
    r = await fb.post("/v1/feedback", json=payload)
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "feedback_unavailable"
    assert r.headers["retry-after"] == "5"
    metrics = (await fb.get("/metrics")).text
    assert metric(metrics, STORED, model="tile") == 0
    assert metric(metrics, "costmodel_store_errors_total", op="add_measurements") >= 0
    assert f"{TAU}{{" not in metrics
    data.unlink()  # the disk is back
    await asyncio.sleep(2.1)  # past the reopen back-off
    r = await fb.post("/v1/feedback", json=payload)
    if r.status_code == 404:  # the graph was seen while the database was down
        assert r.json()["error"]["code"] == "graph_not_found"
        inline = {**payload, "graph": graph_json(kernel)}
        inline.pop("graph_id")
        r = await fb.post("/v1/feedback", json=inline)
    assert r.status_code == 200, r.text
    assert len(rows(default_sqlite_url(data))) == 2


async def test_concurrent_feedback_is_all_stored(
    fb: httpx.AsyncClient, db_url: str, kernel: Sample
) -> None:
    gid = await upload(fb, "tile", kernel)
    configs = kernel.configs[:300].tolist()
    posts = [
        fb.post(
            "/v1/feedback",
            json={
                "model": "tile",
                "graph_id": gid,
                "configs": configs,
                "runtimes_ns": [i + 1] * 300,
            },
        )
        for i in range(12)
    ]
    answers = await asyncio.gather(*posts)
    assert {r.status_code for r in answers} == {200}
    stored = rows(db_url)
    assert len(stored) == 12 * 300
    assert sorted({x["runtime_ns"] for x in stored}) == list(range(1, 13))


async def test_openapi_documents_the_route(fb: httpx.AsyncClient) -> None:
    spec = (await fb.get("/openapi.json")).json()
    post = spec["paths"]["/v1/feedback"]["post"]
    assert {"200", "404", "409", "422", "503"} <= set(post["responses"])
    schemas = spec["components"]["schemas"]
    assert {"FeedbackIn", "FeedbackOut"} <= set(schemas)
    assert schemas["FeedbackIn"]["examples"] and schemas["FeedbackOut"]["examples"]


async def test_config_indices_after_a_compact_layout_batch(
    fb: httpx.AsyncClient, db_url: str, small_layout: Sample
) -> None:
    """An int8 npz batch is remembered as sent and stored as the integers it holds."""
    gid = await upload(fb, "layout", small_layout)
    configs = small_layout.configs[:20].astype(np.int8)
    buf = io.BytesIO()
    np.savez(buf, node_config_feat=configs)
    r = await fb.post(
        f"/v1/rank?model=layout&graph_id={gid}",
        content=buf.getvalue(),
        headers={"Content-Type": "application/x-npz"},
    )
    assert r.status_code == 200, r.text
    scores = np.asarray(r.json()["scores"])
    body = {
        "model": "layout",
        "graph_id": gid,
        "config_indices": [4, 19],
        "ranking_id": r.json()["ranking_id"],
        "runtimes_ns": [200, 100],
    }
    r = await fb.post("/v1/feedback", json=body)
    assert r.status_code == 200, r.text
    stored = rows(db_url)
    assert [x["config"].dtype for x in stored] == [np.int8, np.int8]
    assert np.array_equal(np.stack([x["config"] for x in stored]), configs[[4, 19]])
    assert [x["score"] for x in stored] == pytest.approx(scores[[4, 19]].tolist())


@pytest.mark.parametrize("value", [1e20, 3e38, 2.0**53, -(2.0**63)])
async def test_large_configs_are_stored_as_scored(
    fb: httpx.AsyncClient, db_url: str, kernel: Sample, value: float
) -> None:
    """Values no small integer type holds are stored as the float32 that was scored."""
    gid = await upload(fb, "tile", kernel)
    configs = [[value] * 24, [1.0] * 24]
    r = await fb.post("/v1/feedback", **body(gid, configs=configs))
    assert r.status_code == 200, r.text
    first, second = rows(db_url)
    assert first["config"].tolist() == [float(np.float32(value))] * 24
    assert second["config"].tolist() == [1.0] * 24


async def test_replicas_on_postgresql_share_feedback_and_survive_its_restart(
    make_client: AppClient,
    postgres_server: Any,
    postgres_url: str,
    unet: Sample,
    redis_url: str,
) -> None:
    """Two apps on one real PostgreSQL: feedback through one adapts the other's
    rankings; a PostgreSQL outage is 503 for feedback (nothing stored) and the prior
    alone for rankings; after the restart the resend is stored and adaptation is back."""
    first = await make_client(database_url=postgres_url, redis_url=redis_url)
    second = await make_client(database_url=postgres_url, redis_url=redis_url)
    gid = await upload(first, "layout", unet)
    order = np.random.default_rng(0).permutation(unet.num_configs)
    fed, probe = order[:40], unet.configs[order[40:60]].tolist()
    payload = {
        "model": "layout",
        "graph_id": gid,
        "configs": unet.configs[fed[:20]].tolist(),
        "runtimes_ns": unet.runtimes[fed[:20]].tolist(),
    }
    r = await second.post("/v1/feedback", json=payload)  # never saw the graph
    assert r.status_code == 200, r.text
    ask = {"model": "layout", "graph_id": gid, "configs": probe}
    r = await first.post("/v1/rank", json=ask)
    assert r.status_code == 200 and r.json()["adapted"] > 0, r.text
    postgres_server.shutdown()
    try:
        more = {
            **payload,
            "configs": unet.configs[fed[20:]].tolist(),
            "runtimes_ns": unet.runtimes[fed[20:]].tolist(),
        }
        keyed = {"Idempotency-Key": "pg-outage-1"}
        r = await first.post("/v1/feedback", json=more, headers=keyed)
        assert r.status_code == 503 and r.headers["retry-after"] == "5", r.text
        assert r.json()["error"]["code"] == "feedback_unavailable"
        r = await second.post("/v1/rank", json=ask)
        assert r.status_code == 200 and r.json()["adapted"] == 0, r.text
    finally:
        postgres_server.start()
    await asyncio.sleep(2.1)  # past each app's reopen back-off
    r = await first.post("/v1/feedback", json=more, headers=keyed)
    assert r.status_code == 200, r.text
    again = await first.post("/v1/feedback", json=more, headers=keyed)
    assert again.headers["idempotent-replayed"] == "true"
    assert len(rows(postgres_url)) == 40
    r = await second.post("/v1/rank", json=ask)
    want = len({c.tobytes() for c in unet.configs[fed]})
    assert r.json()["adapted"] == want


async def test_a_graph_missing_from_the_database_is_stored_again_on_upload(
    fb: httpx.AsyncClient, db_url: str, kernel: Sample
) -> None:
    """The process thinks it stored the graph, but the database lost it (restored
    from an older backup): feedback by id is 404, and the client's re-upload stores it
    again instead of being skipped as already kept."""
    gid = await upload(fb, "tile", kernel)
    payload = {
        "model": "tile",
        "graph_id": gid,
        "runtimes_ns": [3, 4],
        "configs": kernel.configs[:2].tolist(),
    }
    r = await fb.post("/v1/feedback", json=payload)  # archives it
    assert r.status_code == 200, r.text
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.delete(measurements))
        conn.execute(sa.delete(graphs))
    engine.dispose()
    r = await fb.post("/v1/feedback", json=payload)
    assert r.status_code == 404 and r.json()["error"]["code"] == "graph_not_found"
    await upload(fb, "tile", kernel)
    r = await fb.post("/v1/feedback", json=payload)
    assert r.status_code == 200, r.text
    assert stored_graph_ids(db_url) == [gid]


async def test_an_npz_answer_names_its_ranking_in_a_header(
    fb: httpx.AsyncClient, db_url: str, kernel: Sample
) -> None:
    gid = await upload(fb, "tile", kernel)
    buf = io.BytesIO()
    np.savez(buf, config_feat=kernel.configs[:8].astype(np.float32))
    r = await fb.post(
        f"/v1/rank?model=tile&graph_id={gid}",
        content=buf.getvalue(),
        headers={**NPZ, "Accept": "application/x-npz"},
    )
    assert r.status_code == 200 and len(r.headers["x-ranking-id"]) == 32
    body = {
        "model": "tile",
        "graph_id": gid,
        "config_indices": [7],
        "ranking_id": r.headers["x-ranking-id"],
        "runtimes_ns": [5],
    }
    r = await fb.post("/v1/feedback", json=body)
    assert r.status_code == 200, r.text
    assert np.array_equal(rows(db_url)[-1]["config"], kernel.configs[7])
