"""Tuning decisions through the real app: POST /v1/decisions stores what a tuner
kept, GET /v1/best answers what the next tuner may reuse (docs/reuse.md), on real
SQLite and PostgreSQL, with the session's redis-server between replicas."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import anyio
import httpx
import numpy as np
import pytest
from answer_keys import BEST_KEYS
from servicekit import AppClient, metric, program

from xla_costmodel import shipped_models
from xla_costmodel.manifest import read_manifest
from xla_costmodel.service.store import MeasurementStore, default_sqlite_url
from xla_costmodel.tpugraphs import xla_cpu

pytestmark = pytest.mark.anyio
# The shipped xla_cpu model's default target (the requests name none): it follows the
# data the model was last trained on (the target with most programs).
TARGET = read_manifest(shipped_models() / "xla_cpu" / "1", verify_files=False).target
DEFAULT = xla_cpu.default_row().tolist()
ROWS = xla_cpu.sample(8, seed=5)[1:].tolist()  # row 0 is the default
# Nothing but the test's own requests may send statements.
QUIET = {"knowledge_refresh_s": 3600.0, "fleet_refresh_s": 3600.0}


def gid(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def decision(graph: str, config: list[Any], **fields: Any) -> dict[str, Any]:
    return {
        "model": "xla_cpu",
        "graph_id": graph,
        "config": config,
        "compiler_options": {"xla_cpu_enable_fast_math": True, "threads": 4},
        "speedup": 1.3,
        "speedup_low": 1.1,
        "speedup_high": None,
        "p_value": 0.01,
        "pairs": 12,
        "budget": 32,
        "strategy": "model",
        "kept_default": False,
        **fields,
    }


async def decide(
    client: httpx.AsyncClient, body: dict[str, Any], **headers: str
) -> dict[str, Any]:
    r = await client.post("/v1/decisions", json=body, headers=headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def best(client: httpx.AsyncClient, graph: str, **params: Any) -> httpx.Response:
    return await client.get(
        "/v1/best", params={"model": "xla_cpu", "graph_id": graph, **params}
    )


async def best_json(client: httpx.AsyncClient, graph: str, **params: Any) -> Any:
    r = await best(client, graph, **params)
    assert r.status_code == 200, r.text
    assert set(r.json()) == BEST_KEYS
    return r.json()


def error(r: httpx.Response, status: int, code: str, field: str | None) -> None:
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code, r.text
    assert r.json()["error"]["field"] == field, r.text


async def statements(client: httpx.AsyncClient) -> float:
    return metric((await client.get("/metrics")).text, "costmodel_db_statements_total")


async def settled(client: httpx.AsyncClient) -> float:
    """The statement count once nothing in the background sends any more."""
    last = await statements(client)
    while True:
        await anyio.sleep(0.3)
        now = await statements(client)
        if now == last:
            return now
        last = now


# -- storing ----------------------------------------------------------------------


async def test_a_decision_is_stored_once_per_idempotency_key(
    client: httpx.AsyncClient,
) -> None:
    body = decision(gid("once"), ROWS[0], compiler="jax 0.4.31", speedup_high=1.5)
    first = await decide(client, body, **{"Idempotency-Key": "tune-1"})
    assert first["stored"] is True and first["decision_id"] > 0
    assert first | {"decision_id": 0} == {
        "stored": True,
        "decision_id": 0,
        "graph_id": gid("once"),
        "target": TARGET,
        "compiler": "jax 0.4.31",
        "model": "xla_cpu",
        "model_version": "1",
    }
    r = await client.post(
        "/v1/decisions", json=body, headers={"Idempotency-Key": "tune-1"}
    )
    assert r.status_code == 200 and r.headers["Idempotent-Replayed"] == "true"
    assert r.json() == first | {"stored": False}
    other = decision(gid("once"), ROWS[1])
    r = await client.post(
        "/v1/decisions", json=other, headers={"Idempotency-Key": "tune-1"}
    )
    error(r, 422, "idempotency_key_reused", "Idempotency-Key")
    answer = await best_json(client, gid("once"), compiler="jax 0.4.31")
    assert answer["config"] == ROWS[0] and answer["writers"] == 1


async def test_feedback_stores_the_compiler_of_each_row(
    client: httpx.AsyncClient, model_dir: Path
) -> None:
    ranked = await client.post(
        "/v1/rank",
        json={"model": "xla_cpu", "graph": program(3), "configs": ROWS[:3]},
    )
    assert ranked.status_code == 200, ranked.text
    graph = ranked.json()["graph_id"]
    feedback = {
        "model": "xla_cpu",
        "graph_id": graph,
        "configs": ROWS[:3],
        "runtimes_ns": [3000, 2000, 1000],
    }
    for compiler in ("jax 0.4.31", None):
        body = feedback if compiler is None else feedback | {"compiler": compiler}
        r = await client.post("/v1/feedback", json=body)
        assert r.status_code == 200, r.text
    r = await client.post("/v1/feedback", json=feedback | {"compiler": "x" * 129})
    error(r, 422, "invalid_request", "compiler")
    store = MeasurementStore.open(default_sqlite_url(model_dir.parent / "data"))
    try:
        rows = store.measurements("xla_cpu", TARGET, graph)
    finally:
        store.close()
    assert rows.compilers == ("jax 0.4.31",) * 3 + (None,) * 3


# -- choosing ---------------------------------------------------------------------


async def test_best_is_the_highest_speedup_low_then_most_writers_then_newest(
    client: httpx.AsyncClient,
) -> None:
    graph = gid("ranked")
    for row, speedup, low in ((0, 1.5, 1.1), (1, 1.4, 1.3), (2, 2.0, 1.2)):
        await decide(
            client, decision(graph, ROWS[row], speedup=speedup, speedup_low=low)
        )
    answer = await best_json(client, graph)
    assert answer["config"] == ROWS[1] and answer["speedup_low"] == 1.3
    assert answer["stale"] is False and answer["compiler"] is None
    assert answer["target"] == TARGET and answer["model"] == "xla_cpu"
    assert answer["compiler_options"] == {
        "threads": 4,
        "xla_cpu_enable_fast_math": True,
    }
    # A tie on speedup_low: the newest (every anonymous decision is one writer).
    await decide(client, decision(graph, ROWS[3], speedup=1.3, speedup_low=1.3))
    assert (await best_json(client, graph))["config"] == ROWS[3]


async def test_the_asked_compiler_is_preferred_else_the_freshest_is_stale(
    client: httpx.AsyncClient,
) -> None:
    graph = gid("compilers")
    await decide(client, decision(graph, ROWS[0], compiler="c1", speedup_low=1.25))
    await decide(client, decision(graph, ROWS[1], compiler="c2", speedup_low=1.05))
    exact = await best_json(client, graph, compiler="c1")
    assert (exact["config"], exact["compiler"], exact["stale"]) == (
        ROWS[0],
        "c1",
        False,
    )
    # No decision under c3: the freshest compiler's, flagged stale.
    stale = await best_json(client, graph, compiler="c3")
    assert (stale["config"], stale["compiler"], stale["stale"]) == (ROWS[1], "c2", True)
    anyone = await best_json(client, graph)
    assert (anyone["compiler"], anyone["stale"]) == ("c2", False)
    error(await best(client, gid("never")), 404, "no_decision", "graph_id")
    text = (await client.get("/metrics")).text
    name = "costmodel_best_lookups_total"
    assert metric(text, name, target=TARGET, result="hit") == 2
    assert metric(text, name, target=TARGET, result="stale") == 1
    assert metric(text, name, target=TARGET, result="miss") == 1
    assert metric(text, "costmodel_decisions_total", target=TARGET) == 2
    assert metric(text, "costmodel_reuses_total", target=TARGET) == 0
    await decide(client, decision(graph, ROWS[1], compiler="c3", strategy="reuse"))
    text = (await client.get("/metrics")).text
    assert metric(text, "costmodel_reuses_total", target=TARGET) == 1


async def test_a_kept_default_answers_the_default(client: httpx.AsyncClient) -> None:
    graph = gid("default")
    kept = decision(
        graph,
        DEFAULT,
        compiler_options={},
        kept_default=True,
        speedup=1.0,
        speedup_low=0.9,
        speedup_high=1.1,
    )
    await decide(client, kept)
    answer = await best_json(client, graph)
    assert answer["config"] == DEFAULT and answer["compiler_options"] == {}
    assert answer["kept_default"] is True
    r = await client.post("/v1/decisions", json=kept | {"compiler_options": {"a": 1}})
    error(r, 422, "invalid_request", "compiler_options")
    r = await client.post("/v1/decisions", json=kept | {"config": ROWS[0]})
    error(r, 422, "invalid_request", "config")


async def test_unknown_models_and_graphs_are_404(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/best", params={"model": "nope", "graph_id": gid("x")})
    error(r, 404, "model_not_found", "model")
    r = await client.post(
        "/v1/decisions", json=decision(gid("x"), ROWS[0]) | {"model": "nope"}
    )
    error(r, 404, "model_not_found", "model")
    await decide(client, decision(gid("x"), ROWS[0]))
    error(await best(client, gid("x"), target="tpu-v3"), 404, "no_decision", "graph_id")
    # One (anonymous) writer decided it: not enough for two.
    error(await best(client, gid("x"), min_writers=2), 404, "no_decision", "graph_id")


BAD_BODIES = [
    ({"graph_id": "ab"}, "graph_id"),
    ({"config": ROWS[0][:-1]}, "config"),
    ({"config": [ROWS[0], ROWS[1]]}, "config"),
    ({"config": [True] * 17}, "config"),
    ({"config": ["1"] * 17}, "config"),
    ({"config": []}, "config"),
    ({"config": [1e39] * 17}, "config"),
    ({"speedup": 0}, "speedup"),
    ({"speedup_low": -1}, "speedup_low"),
    ({"speedup_low": 2.0}, "speedup_low"),
    ({"speedup_high": 1.0}, "speedup_high"),
    ({"p_value": 1.5}, "p_value"),
    ({"pairs": -1}, "pairs"),
    ({"budget": 1.5}, "budget"),
    ({"strategy": "s" * 17}, "strategy"),
    ({"kept_default": "yes"}, "kept_default"),
    ({"compiler": ""}, "compiler"),
    ({"compiler": "c\n"}, "compiler"),
    ({"target": "no spaces"}, "target"),
    ({"model_version": "v1"}, "model_version"),
    ({"compiler_options": {"a": [1]}}, "compiler_options.a"),
    ({"compiler_options": []}, "compiler_options"),
    ({"surprise": 1}, "surprise"),
]


@pytest.mark.parametrize(("change", "field"), BAD_BODIES)
async def test_bad_decisions_are_422_naming_the_field(
    client: httpx.AsyncClient, change: dict[str, Any], field: str
) -> None:
    r = await client.post("/v1/decisions", json=decision(gid("bad"), ROWS[0]) | change)
    error(r, 422, "invalid_request", field)


async def test_bad_lookups_and_bodies(client: httpx.AsyncClient) -> None:
    bad: tuple[tuple[dict[str, Any], str], ...] = (
        ({"graph_id": "xyz"}, "graph_id"),
        ({"min_writers": 0}, "min_writers"),
        ({"compiler": "x" * 129}, "compiler"),
        ({"target": "a b"}, "target"),
    )
    for params, field in bad:
        r = await client.get(
            "/v1/best", params={"model": "xla_cpu", "graph_id": gid("b")} | params
        )
        error(r, 422, "invalid_request", field)
    r = await client.get("/v1/best", params={"graph_id": gid("b")})
    error(r, 422, "invalid_request", "model")
    body = decision(gid("b"), ROWS[0])
    r = await client.post(
        "/v1/decisions", content=b"{", headers={"content-type": "application/json"}
    )
    error(r, 400, "malformed_body", "body")
    r = await client.post("/v1/decisions", content=str(body).encode())
    error(r, 415, "unsupported_media_type", "content-type")
    r = await client.post(
        "/v1/decisions", json=body, headers={"Idempotency-Key": "a b"}
    )
    error(r, 422, "invalid_request", "Idempotency-Key")


# -- writers ----------------------------------------------------------------------


async def test_writers_authorise_and_count_and_revoked_ones_are_not_served(
    make_client: AppClient, model_dir: Path
) -> None:
    client = await make_client(feedback_auth="token", **QUIET)
    store = MeasurementStore.open(default_sqlite_url(model_dir.parent / "data"))
    try:
        tokens = {
            name: store.writers.create(name, targets)
            for name, targets in (("a", [TARGET]), ("b", None), ("tpu", ["tpu-v3"]))
        }

        def auth(name: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {tokens[name]}"}

        graph = gid("writers")
        body = decision(graph, ROWS[0], speedup_low=1.1)
        r = await client.post("/v1/decisions", json=body)
        error(r, 401, "unauthorized", "Authorization")
        r = await client.post(
            "/v1/decisions", json=body, headers={"Authorization": "Bearer cmw_nope"}
        )
        error(r, 401, "unauthorized", "Authorization")
        r = await client.post("/v1/decisions", json=body, headers=auth("tpu"))
        error(r, 403, "forbidden", "target")
        error(await best(client, graph), 404, "no_decision", "graph_id")

        # Two writers agree on ROWS[0]; b alone claims more for ROWS[1].
        await decide(client, body, **auth("a"))
        await decide(client, body, **auth("b"))
        await decide(client, decision(graph, ROWS[1], speedup_low=1.2), **auth("b"))
        lone = await best_json(client, graph)
        assert (lone["config"], lone["writers"]) == (ROWS[1], 1)
        agreed = await best_json(client, graph, min_writers=2)
        assert (agreed["config"], agreed["writers"]) == (ROWS[0], 2)

        store.writers.revoke("b")  # not a write: served until the entry is reread
        await decide(client, decision(graph, ROWS[2], speedup_low=1.01), **auth("a"))
        after = await best_json(client, graph)
        assert (after["config"], after["writers"]) == (ROWS[0], 1)
        error(await best(client, graph, min_writers=2), 404, "no_decision", "graph_id")
        assert store.decisions.counts() == {("xla_cpu", "xla_cpu", TARGET): 4}
    finally:
        store.close()


# -- no statement per lookup, two databases, two replicas ---------------------------


async def _backend(request: pytest.FixtureRequest, backend: str) -> dict[str, Any]:
    if backend == "sqlite":
        return dict(QUIET)
    return {
        "database_url": request.getfixturevalue("postgres_url"),
        "redis_url": request.getfixturevalue("redis_url"),
        **QUIET,
    }


async def live(client: httpx.AsyncClient) -> None:
    """Until the app's invalidation subscription is up (Redis pub/sub)."""
    with anyio.fail_after(10):
        while not metric(
            (await client.get("/metrics")).text, "costmodel_generation_subscribed"
        ):
            await anyio.sleep(0.02)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_lookup_of_a_known_graph_sends_no_statement(
    make_client: AppClient, request: pytest.FixtureRequest, backend: str
) -> None:
    client = await make_client(**await _backend(request, backend))
    if backend == "postgresql":
        await live(client)
    graph = gid("hot")
    await decide(client, decision(graph, ROWS[0]))
    await best_json(client, graph)  # reads the graph's decisions once
    error(await best(client, gid("cold")), 404, "no_decision", "graph_id")
    before = await settled(client)
    for _ in range(25):
        assert (await best_json(client, graph))["config"] == ROWS[0]
        error(await best(client, gid("cold")), 404, "no_decision", "graph_id")
    assert await statements(client) == before
    # This process knows its own write at once.
    await decide(client, decision(graph, ROWS[1], speedup_low=1.2))
    assert (await best_json(client, graph))["config"] == ROWS[1]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_program_is_found_by_its_hlo_fingerprint_statement_free(
    make_client: AppClient, request: pytest.FixtureRequest, backend: str
) -> None:
    """``jit`` asks by the fingerprint of the HLO text (no featurizing): the answer
    is the graph's, and once the fingerprint is known it costs no statement."""
    client = await make_client(**await _backend(request, backend))
    if backend == "postgresql":
        await live(client)
    graph, fingerprint = gid("printed"), gid("printed-hlo")
    await decide(client, decision(graph, ROWS[2], hlo_fingerprint=fingerprint))
    params = {"model": "xla_cpu", "hlo_fingerprint": fingerprint}
    r = await client.get("/v1/best", params=params)
    assert r.status_code == 200, r.text
    assert r.json()["graph_id"] == graph and r.json()["config"] == ROWS[2]
    before = await settled(client)
    for _ in range(10):
        assert (await client.get("/v1/best", params=params)).status_code == 200
    assert await statements(client) == before
    unknown = {"model": "xla_cpu", "hlo_fingerprint": gid("never")}
    error(
        await client.get("/v1/best", params=unknown),
        404,
        "no_decision",
        "hlo_fingerprint",
    )
    both = {**params, "graph_id": graph}
    error(await client.get("/v1/best", params=both), 422, "invalid_request", "graph_id")
    neither = {"model": "xla_cpu"}
    error(
        await client.get("/v1/best", params=neither), 422, "invalid_request", "graph_id"
    )


async def _scenario(client: httpx.AsyncClient) -> list[Any]:
    graph = gid("same")
    for i, (compiler, low) in enumerate(
        (("c1", 1.1), ("c1", 1.3), ("c2", 1.2), (None, 1.4), ("c2", 1.2))
    ):
        await decide(
            client,
            decision(
                graph, ROWS[i % 3], compiler=compiler, speedup=2.0, speedup_low=low
            ),
        )
    answers = []
    for params in ({}, {"compiler": "c1"}, {"compiler": "c2"}, {"compiler": "c9"}):
        r = await best(client, graph, **params)
        answers.append(
            r.json() | {"decided_at": None} if r.status_code == 200 else r.status_code
        )
    answers.append((await best(client, graph, min_writers=2)).status_code)
    return answers


async def test_sqlite_and_postgresql_answer_alike(
    make_client: AppClient, postgres_url: str
) -> None:
    on_sqlite = await _scenario(await make_client())
    on_postgres = await _scenario(await make_client(database_url=postgres_url))
    assert on_sqlite == on_postgres
    assert on_sqlite[0]["compiler"] == "c2"  # the freshest compiler's
    assert on_sqlite[1]["config"] == ROWS[1] and on_sqlite[3]["stale"] is True


async def test_another_replica_sees_a_new_decision(
    make_client: AppClient, postgres_url: str, redis_url: str
) -> None:
    shared = {"database_url": postgres_url, "redis_url": redis_url, **QUIET}
    a, b = await make_client(**shared), await make_client(**shared)
    await live(a)
    await live(b)
    graph = gid("replicas")
    error(await best(b, graph), 404, "no_decision", "graph_id")  # b caches "none"
    await decide(a, decision(graph, ROWS[0]))
    with anyio.fail_after(10):  # b's cached "none" is trusted 60 s unless told
        while (await best(b, graph)).status_code != 200:
            await anyio.sleep(0.01)
    await decide(a, decision(graph, ROWS[1], speedup_low=1.2))
    with anyio.fail_after(10):
        while (await best_json(b, graph))["config"] != ROWS[1]:
            await anyio.sleep(0.01)


async def test_targets_count_decisions(make_client: AppClient) -> None:
    client = await make_client(fleet_refresh_s=0.1)
    await decide(client, decision(gid("t1"), ROWS[0]))
    await decide(client, decision(gid("t2"), ROWS[0], target="cpu-other"))
    with anyio.fail_after(10):
        while True:
            targets = (await client.get("/v1/targets")).json()["targets"]
            counts = {t["target"]: t["decisions"] for t in targets}
            if counts == {TARGET: 1, "cpu-other": 1}:
                break
            await anyio.sleep(0.05)
    assert all(t["programs"] == 0 for t in targets)


def test_rows_are_distinct() -> None:
    assert len(np.unique(np.asarray(ROWS), axis=0)) == len(ROWS)
