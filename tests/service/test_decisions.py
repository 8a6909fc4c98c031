"""Tuning decisions through the real app: POST /v1/decisions stores what a tuner
kept, GET /v1/best answers what the next tuner may reuse (docs/reuse.md), on real
SQLite and PostgreSQL, with the session's redis-server between replicas."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import numpy as np
import pytest
import sqlalchemy as sa
from alembic import command
from answer_keys import BEST_KEYS
from servicekit import AppClient, metric, program

from xla_costmodel import shipped_models
from xla_costmodel.manifest import read_manifest
from xla_costmodel.service.core.decision_cache import DecisionCache, DecisionKey, weigh
from xla_costmodel.service.core.events import DecisionsWritten
from xla_costmodel.service.store import (
    MeasurementStore,
    StoredDecision,
    codec,
    default_sqlite_url,
)
from xla_costmodel.service.store.migrate import alembic_config
from xla_costmodel.service.store.schema import decisions
from xla_costmodel.tpugraphs import xla_cpu, xla_cpu2
from xla_costmodel.tpugraphs.paired import summarize

pytestmark = pytest.mark.anyio
# The shipped xla_cpu model's default target (the requests name none): it follows the
# data the model was last trained on (the target with most programs).
TARGET = read_manifest(shipped_models() / "xla_cpu" / "1", verify_files=False).target
DEFAULT = xla_cpu2.default_row().tolist()
# Row 0 is the default; rows 1 and 2 of the sample (ROWS[0], ROWS[1]) are the default
# with the loop threshold at 65536 and 1e9: options with the extra-options map.
ROWS = xla_cpu2.sample(8, seed=5)[1:].tolist()
# Nothing but the test's own requests may send statements.
QUIET = {"knowledge_refresh_s": 3600.0, "fleet_refresh_s": 3600.0}


def options_of(row: list[Any]) -> dict[str, Any]:
    """What a decision of ``row`` answers: its options as ``flat`` spells them."""
    return xla_cpu2.to_options(row).flat()


def gid(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def pairs(speedup: float, n: int = 8) -> list[list[int]]:
    """Paired runtimes (default, config) whose smallest ratio is ``speedup``."""
    return [[round(1000 * speedup * (1 + 0.01 * i)), 1000] for i in range(n)]


def decision(graph: str, config: list[Any], **fields: Any) -> dict[str, Any]:
    return {
        "model": "xla_cpu",
        "graph_id": graph,
        "config": config,
        "paired_runtimes_ns": pairs(1.3),
        "budget": 32,
        "strategy": "model",
        "kept_default": False,
        **fields,
    }


def kept(graph: str, **fields: Any) -> dict[str, Any]:
    body = decision(graph, DEFAULT, kept_default=True, **fields)
    del body["paired_runtimes_ns"]
    return body


async def measure(
    client: httpx.AsyncClient,
    name: str,
    headers: dict[str, str] | None = None,
    **fields: Any,
) -> str:
    """Store a measurement of a fresh program (the graph inline): its graph id.
    A decision's pairs are measurements of a stored graph."""
    seed = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16)
    body = {
        "model": "xla_cpu",
        "graph": program(seed),
        "configs": [DEFAULT],
        "runtimes_ns": [1000],
        **fields,
    }
    r = await client.post("/v1/feedback", json=body, headers=headers or {})
    assert r.status_code == 200, r.text
    return str(r.json()["graph_id"])


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
    graph = await measure(client, "once")
    body = decision(graph, ROWS[0], compiler="jax 0.4.31")
    first = await decide(client, body, **{"Idempotency-Key": "tune-1"})
    assert first["stored"] is True and first["decision_id"] > 0
    figures = summarize(pairs(1.3))
    assert first | {"decision_id": 0} == {
        "stored": True,
        "decision_id": 0,
        "graph_id": graph,
        "target": TARGET,
        "compiler": "jax 0.4.31",
        "model": "xla_cpu",
        "model_version": "1",
        "compiler_options": options_of(ROWS[0]),
        "speedup": figures.speedup,
        "speedup_low": figures.speedup_low,
        "speedup_high": figures.speedup_high,
        "p_value": figures.p_value,
        "pairs": 8,
        "replaced": False,
    }
    r = await client.post(
        "/v1/decisions", json=body, headers={"Idempotency-Key": "tune-1"}
    )
    assert r.status_code == 200 and r.headers["Idempotent-Replayed"] == "true"
    assert r.json() == first | {"stored": False}
    other = decision(graph, ROWS[1])
    r = await client.post(
        "/v1/decisions", json=other, headers={"Idempotency-Key": "tune-1"}
    )
    error(r, 422, "idempotency_key_reused", "Idempotency-Key")
    answer = await best_json(client, graph, compiler="jax 0.4.31")
    assert answer["config"] == ROWS[0] and answer["writers"] == 1


async def test_the_server_derives_options_and_figures_claims_are_not_stored(
    client: httpx.AsyncClient, model_dir: Path
) -> None:
    graph = await measure(client, "claims")
    claims = {"speedup": 50.0, "speedup_low": 49.0, "p_value": 0.0, "pairs": 10**6}
    options = options_of(ROWS[2])
    stored = await decide(
        client, decision(graph, ROWS[2], compiler_options=options, **claims)
    )
    assert stored["speedup_low"] == 1.3 and stored["pairs"] == 8
    answer = await best_json(client, graph)
    assert answer["compiler_options"] == options and answer["speedup_low"] == 1.3
    # The pairs are the writer's measurements of the graph: 1 + 2 x 8 rows.
    store = MeasurementStore.open(default_sqlite_url(model_dir.parent / "data"))
    try:
        rows = store.measurements("xla_cpu", TARGET, graph)
    finally:
        store.close()
    assert len(rows) == 17
    assert rows.runtimes_ns[1:3].tolist() == pairs(1.3)[0]
    np.testing.assert_array_equal(rows.configs[1:3], [DEFAULT, ROWS[2]])
    # A newer decision of the same program replaces it.
    again = await decide(client, decision(graph, ROWS[3]))
    assert again["replaced"] is True
    assert (await best_json(client, graph))["config"] == ROWS[3]


async def test_unmeasured_decisions_are_refused(client: httpx.AsyncClient) -> None:
    graph = await measure(client, "unmeasured")
    body = decision(graph, ROWS[0])
    del body["paired_runtimes_ns"]
    claims = {"speedup": 50.0, "speedup_low": 50.0, "pairs": 1000}
    r = await client.post("/v1/decisions", json=body | claims)
    error(r, 422, "decision_unmeasured", "paired_runtimes_ns")
    # The graph must be stored: the pairs are measurements of it.
    r = await client.post("/v1/decisions", json=decision(gid("never-sent"), ROWS[0]))
    error(r, 422, "decision_unmeasured", "graph_id")
    r = await client.post("/v1/decisions", json=kept(gid("never-sent")))
    error(r, 422, "decision_unmeasured", "graph_id")
    error(await best(client, graph), 404, "no_decision", "graph_id")


async def test_a_kept_default_answers_the_default(client: httpx.AsyncClient) -> None:
    graph = await measure(client, "default")
    await decide(client, kept(graph))
    answer = await best_json(client, graph)
    assert answer["config"] == DEFAULT and answer["compiler_options"] == {}
    assert answer["kept_default"] is True
    r = await client.post(
        "/v1/decisions", json=kept(graph) | {"compiler_options": {"a": 1}}
    )
    error(r, 422, "invalid_request", "compiler_options")
    r = await client.post("/v1/decisions", json=kept(graph) | {"config": ROWS[0]})
    error(r, 422, "invalid_request", "config")
    r = await client.post(
        "/v1/decisions", json=kept(graph) | {"paired_runtimes_ns": pairs(1.0)}
    )
    error(r, 422, "invalid_request", "paired_runtimes_ns")


async def test_unknown_models_and_graphs_are_404(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/best", params={"model": "nope", "graph_id": gid("x")})
    error(r, 404, "model_not_found", "model")
    r = await client.post(
        "/v1/decisions", json=decision(gid("x"), ROWS[0]) | {"model": "nope"}
    )
    error(r, 404, "model_not_found", "model")
    graph = await measure(client, "x")
    await decide(client, decision(graph, ROWS[0]))
    error(await best(client, graph, target="tpu-v3"), 404, "no_decision", "graph_id")
    # One (anonymous) writer decided it: not enough for two.
    error(await best(client, graph, min_writers=2), 404, "no_decision", "graph_id")


EXCLUDED = xla_cpu2.default_row()
EXCLUDED[[1, 7]] = 1  # ynn_eltwise with disable_algsimp: never sampled
TWO_LEVELS = xla_cpu2.default_row()
TWO_LEVELS[-2] = 1  # the threshold at its default and at 65536
BAD_BODIES = [
    ({"graph_id": "ab"}, "graph_id"),
    ({"config": ROWS[0][:-1]}, "config"),  # 19 wide: no spec's
    ({"config": ROWS[0][:-4]}, "config"),  # 16
    ({"config": [*ROWS[0], 0]}, "config"),  # 21
    ({"config": TWO_LEVELS.tolist()}, "config"),
    ({"config": [1] * 20}, "config"),
    ({"config": EXCLUDED[:17].tolist()}, "config"),  # an excluded xla_cpu/1 row
    ({"compiler_options": {}}, "compiler_options"),  # ROWS[0] sets the threshold
    ({"compiler_options": {xla_cpu2.THRESHOLD_KEY: "65536"}}, "compiler_options"),
    (
        {"compiler_options": {xla_cpu2.EXTRA_KEY: f"{xla_cpu2.THRESHOLD_KEY}=1e9"}},
        "compiler_options",
    ),
    ({"config": [ROWS[0], ROWS[1]]}, "config"),
    ({"config": [True] * 17}, "config"),
    ({"config": ["1"] * 17}, "config"),
    ({"config": []}, "config"),
    ({"config": [1e39] * 17}, "config"),
    ({"config": [1] * 17}, "config"),  # three scheduler bits
    ({"config": [2, *ROWS[0][1:]]}, "config"),
    ({"config": EXCLUDED.tolist()}, "config"),
    ({"config": DEFAULT}, "kept_default"),  # the default, timed against itself
    ({"compiler_options": {"xla_cpu_enable_fast_math": True}}, "compiler_options"),
    ({"compiler_options": {"xla_disable_all_hlo_passes": True}}, "compiler_options"),
    ({"compiler_options": {"xla_dump_to": "/tmp/x"}}, "compiler_options"),
    ({"compiler_options": {"a": [1]}}, "compiler_options.a"),
    ({"compiler_options": []}, "compiler_options"),
    ({"paired_runtimes_ns": [[1000, 900]]}, "paired_runtimes_ns"),
    ({"paired_runtimes_ns": [[1000, 900]] * 257}, "paired_runtimes_ns"),
    ({"paired_runtimes_ns": [[0, 900], [1, 1]]}, "paired_runtimes_ns"),
    ({"paired_runtimes_ns": [[2**63, 900], [1, 1]]}, "paired_runtimes_ns"),
    ({"paired_runtimes_ns": [[1, 2, 3], [1, 1]]}, "paired_runtimes_ns"),
    ({"speedup": 0}, "speedup"),
    ({"speedup_low": -1}, "speedup_low"),
    ({"p_value": 1.5}, "p_value"),
    ({"pairs": -1}, "pairs"),
    ({"budget": 1.5}, "budget"),
    ({"strategy": "s" * 17}, "strategy"),
    ({"kept_default": "yes"}, "kept_default"),
    ({"compiler": ""}, "compiler"),
    ({"compiler": "c\n"}, "compiler"),
    ({"compiler": "jax\u0085"}, "compiler"),  # C1: NEL
    ({"compiler": "jax \u202e1.0"}, "compiler"),  # bidi: right-to-left override
    ({"compiler": "jax \u2066x\u2069"}, "compiler"),
    ({"target": "no spaces"}, "target"),
    ({"model_version": "v1"}, "model_version"),
    ({"model_version": "9" * 65}, "model_version"),  # was a 500
    ({"refuted": {"config": ROWS[1], "reason": "wrong"}}, "refuted.reason"),
    ({"refuted": {"config": [1] * 17, "reason": "outputs"}}, "refuted.config"),
    (
        {"refuted": {"config": TWO_LEVELS.tolist(), "reason": "outputs"}},
        "refuted.config",
    ),
    ({"refuted": {"config": [1] * 19, "reason": "outputs"}}, "refuted.config"),
    ({"refuted": {"config": ROWS[0], "reason": "outputs"}}, "refuted.config"),
    ({"refuted": {"config": DEFAULT, "reason": "outputs"}}, "refuted.config"),
    (
        {"refuted": {"config": ROWS[1], "reason": "outputs"} | {"x": 1}},
        "refuted.x",
    ),
    (
        {
            "refuted": {"config": ROWS[1], "reason": "slower"}
            | {"paired_runtimes_ns": pairs(1.1)}
        },
        "refuted",
    ),
    ({"surprise": 1}, "surprise"),
]


@pytest.mark.parametrize(("change", "field"), BAD_BODIES)
async def test_bad_decisions_are_422_naming_the_field(
    client: httpx.AsyncClient, change: dict[str, Any], field: str
) -> None:
    graph = await measure(client, "bad")
    r = await client.post("/v1/decisions", json=decision(graph, ROWS[0]) | change)
    error(r, 422, "invalid_request", field)
    error(await best(client, graph), 404, "no_decision", "graph_id")


async def test_bad_lookups_and_bodies(client: httpx.AsyncClient) -> None:
    bad: tuple[tuple[dict[str, Any], str], ...] = (
        ({"graph_id": "xyz"}, "graph_id"),
        ({"min_writers": 0}, "min_writers"),
        ({"compiler": "x" * 129}, "compiler"),
        ({"compiler": "x\u202e"}, "compiler"),
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


# -- xla_cpu/2, and xla_cpu/1 rows from old clients --------------------------------

V1_ROWS = xla_cpu.sample(8, seed=5)[1:]  # old clients' rows (row 0 is the default)


async def test_a_threshold_row_is_answered_with_the_map(
    client: httpx.AsyncClient,
) -> None:
    graph = await measure(client, "threshold")
    options = {xla_cpu2.EXTRA_KEY: f"{xla_cpu2.THRESHOLD_KEY}=65536"}
    assert options_of(ROWS[0]) == options  # the default with the threshold at 65536
    stored = await decide(client, decision(graph, ROWS[0], compiler_options=options))
    assert stored["compiler_options"] == options
    answer = await best_json(client, graph)
    assert answer["config"] == ROWS[0] and answer["compiler_options"] == options


async def test_an_old_clients_17_wide_decision_is_its_upgrade(
    make_client: AppClient, model_dir: Path
) -> None:
    """Stored, answered and voted on as the xla_cpu/2 row it stands for: an old
    client's row and a new client's same row are two votes for one row."""
    client = await make_client(feedback_auth="token", **QUIET)
    auth = Writers(model_dir, "old", "new", "verifier")
    row, today = V1_ROWS[0].tolist(), xla_cpu2.upgrade_v1(V1_ROWS[0]).tolist()
    old_options = xla_cpu.to_options(row)  # what an old client derived and sends
    assert old_options == options_of(today)
    graph = await measure(client, "old", auth("old"), configs=[DEFAULT[:17]])
    sent = decision(graph, row, compiler_options=old_options)
    assert (await decide(client, sent, **auth("old")))["compiler_options"] == (
        old_options
    )
    answer = await best_json(client, graph)
    assert (answer["config"], answer["writers"]) == (today, 1)
    await decide(client, decision(graph, today), **auth("new"))
    assert (await best_json(client, graph, min_writers=2))["config"] == today
    # Its kept default and its refutation are the same rows too.
    slower = [[1000, round(1000 * 1.2 * (1 + 0.01 * i))] for i in range(8)]
    refuted = {"config": row, "reason": "slower", "paired_runtimes_ns": slower}
    await measure(client, "old", auth("verifier"))
    await decide(
        client,
        kept(graph, refuted=refuted) | {"config": DEFAULT[:17]},
        **auth("verifier"),
    )
    answer = await best_json(client, graph)  # 2 supporters, 1 opposer
    assert (answer["config"], answer["writers"]) == (today, 2)
    store = MeasurementStore.open(default_sqlite_url(model_dir.parent / "data"))
    try:
        rows = store.measurements("xla_cpu", TARGET, graph)
        decided = store.decisions.for_graph("xla_cpu", TARGET, graph)
    finally:
        store.close()
    assert rows.configs.shape[1:] == (xla_cpu2.WIDTH,)
    assert {d.config.shape for d in decided} == {(xla_cpu2.WIDTH,)}
    refutations = [d.refuted_config for d in decided if d.refuted_config is not None]
    np.testing.assert_array_equal(refutations, [today])


async def test_a_decision_stored_before_the_xla_cpu2_migration_is_served(
    make_client: AppClient, model_dir: Path
) -> None:
    """A database an older release wrote (revision 0004, xla_cpu/1 rows): the app
    migrates it on start and serves the decision as its xla_cpu/2 row."""
    graph = gid("before-0005")
    url = default_sqlite_url(model_dir.parent / "data")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0004")
    blobs, dtype, shape = codec.encode_configs(V1_ROWS[:1].astype(np.int8))
    with engine.begin() as conn:
        conn.execute(
            decisions.insert(),
            {
                "decided_at": datetime.now(UTC),
                "model": "xla_cpu",
                "model_version": "1",
                "collection": "xla_cpu",
                "target": TARGET,
                "compiler": None,
                "graph_id": graph,
                "config": blobs[0],
                "config_dtype": dtype,
                "config_shape": shape,
                "compiler_options": json.dumps(xla_cpu.to_options(V1_ROWS[0])),
                "speedup": 1.3,
                "speedup_low": 1.2,
                "speedup_high": 1.4,
                "p_value": 0.01,
                "pairs": 8,
                "budget": 32,
                "strategy": "model",
                "kept_default": False,
            },
        )
    engine.dispose()
    assert shape == "17"
    client = await make_client(**QUIET)
    answer = await best_json(client, graph)
    assert answer["config"] == xla_cpu2.upgrade_v1(V1_ROWS[0]).tolist()
    assert answer["compiler_options"] == xla_cpu.to_options(V1_ROWS[0])


# -- the rule (docs/reuse.md, "What the fleet applies") ----------------------------


class Writers:
    """Writers created in the app's database, and their headers."""

    def __init__(self, model_dir: Path, *names: str, **targets: list[str]) -> None:
        store = MeasurementStore.open(default_sqlite_url(model_dir.parent / "data"))
        try:
            self.tokens = {n: store.writers.create(n) for n in names} | {
                n: store.writers.create(n, t) for n, t in targets.items()
            }
        finally:
            store.close()

    def __call__(self, name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[name]}"}


async def test_each_writer_is_one_vote_and_more_writers_outrank_a_bigger_claim(
    make_client: AppClient, model_dir: Path
) -> None:
    client = await make_client(feedback_auth="token", **QUIET)
    auth = Writers(model_dir, "a", "b", "c", "x")
    graph = await measure(client, "votes", auth("a"))
    for name in ("a", "b", "c"):
        await decide(
            client,
            decision(graph, ROWS[0], paired_runtimes_ns=pairs(1.1)),
            **auth(name),
        )
    # One writer measured ROWS[1] far faster (its own pairs, stored): one vote.
    for row in (ROWS[2], ROWS[1]):  # its newest decision is its vote
        await decide(
            client, decision(graph, row, paired_runtimes_ns=pairs(9.0)), **auth("x")
        )
    answer = await best_json(client, graph)
    assert (answer["config"], answer["writers"]) == (ROWS[0], 3)
    assert answer["speedup_low"] == 1.1
    # A tie on votes: the higher median speedup_low.
    other = await measure(client, "tie", auth("a"))
    await decide(
        client, decision(other, ROWS[0], paired_runtimes_ns=pairs(1.1)), **auth("a")
    )
    await decide(
        client, decision(other, ROWS[1], paired_runtimes_ns=pairs(1.2)), **auth("b")
    )
    assert (await best_json(client, other))["config"] == ROWS[1]
    # Measured, but not faster (p > 0.05): supports nothing.
    flat = await measure(client, "flat", auth("a"))
    noise = [[1000, 1000 + i] for i in range(-4, 4)]
    await decide(client, decision(flat, ROWS[0], paired_runtimes_ns=noise), **auth("a"))
    error(await best(client, flat), 404, "no_decision", "graph_id")


async def test_a_verification_that_shows_a_row_slower_counts_against_it(
    make_client: AppClient, model_dir: Path
) -> None:
    client = await make_client(feedback_auth="token", **QUIET)
    auth = Writers(model_dir, "first", "verifier", "jit")
    graph = await measure(client, "refuted", auth("first"))
    await decide(client, decision(graph, ROWS[4]), **auth("first"))
    assert (await best_json(client, graph))["config"] == ROWS[4]
    slower = [[1000, round(1000 * 1.2 * (1 + 0.01 * i))] for i in range(8)]
    refuted = {"config": ROWS[4], "reason": "slower", "paired_runtimes_ns": slower}
    await decide(client, kept(graph, refuted=refuted), **auth("verifier"))
    # 1 supporter, 1 opposer: not served; the verifier's kept default is.
    answer = await best_json(client, graph)
    assert (answer["config"], answer["kept_default"]) == (DEFAULT, True)
    # Measured slower itself (speedup_high < 1) is an opposer too.
    other = await measure(client, "slower", auth("first"))
    await decide(client, decision(other, ROWS[5]), **auth("first"))
    await decide(
        client, decision(other, ROWS[5], paired_runtimes_ns=slower), **auth("verifier")
    )
    error(await best(client, other), 404, "no_decision", "graph_id")
    # An outputs report vetoes the row for that compiler, whatever the votes; it
    # needs no measurements of the graph (jit's verification).
    vetoed = await measure(client, "vetoed", auth("first"))
    for name in ("first", "verifier"):
        await decide(client, decision(vetoed, ROWS[6], compiler="c1"), **auth(name))
        await decide(client, decision(vetoed, ROWS[6], compiler="c2"), **auth(name))
    report = {"config": ROWS[6], "reason": "outputs"}
    await decide(client, kept(vetoed, compiler="c1", refuted=report), **auth("jit"))
    answer = await best_json(client, vetoed, compiler="c1")
    assert (answer["config"], answer["writers"]) == (DEFAULT, 1)
    under_c2 = await best_json(client, vetoed, compiler="c2")
    assert (under_c2["config"], under_c2["writers"]) == (ROWS[6], 2)


async def test_min_writers_counts_the_supporters_of_the_exact_row(
    make_client: AppClient, model_dir: Path
) -> None:
    """A reuse verification of the default is no vote for another row."""
    client = await make_client(feedback_auth="token", **QUIET)
    auth = Writers(model_dir, "a", "b", "c")
    graph = await measure(client, "min", auth("a"))
    await decide(client, decision(graph, ROWS[0]), **auth("a"))
    for name in ("b", "c"):
        await measure(client, "min", auth(name))
        await decide(client, kept(graph, strategy="reuse"), **auth(name))
    answer = await best_json(client, graph, min_writers=2)
    assert (answer["config"], answer["writers"]) == (DEFAULT, 2)
    error(await best(client, graph, min_writers=3), 404, "no_decision", "graph_id")


async def test_the_asked_compiler_is_preferred_else_the_freshest_is_stale(
    client: httpx.AsyncClient,
) -> None:
    graph = await measure(client, "compilers")
    await decide(client, decision(graph, ROWS[0], compiler="c1"))
    await decide(client, decision(graph, ROWS[1], compiler="c2"))
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


# -- writers ----------------------------------------------------------------------


async def test_writers_authorise_and_count_and_revoked_ones_are_not_served(
    make_client: AppClient, model_dir: Path
) -> None:
    client = await make_client(feedback_auth="token", **QUIET)
    auth = Writers(model_dir, "b", a=[TARGET], tpu=["tpu-v3"])
    graph = await measure(client, "writers", auth("a"))
    body = decision(graph, ROWS[0])
    r = await client.post("/v1/decisions", json=body)
    error(r, 401, "unauthorized", "Authorization")
    r = await client.post(
        "/v1/decisions", json=body, headers={"Authorization": "Bearer cmw_nope"}
    )
    error(r, 401, "unauthorized", "Authorization")
    r = await client.post("/v1/decisions", json=body, headers=auth("tpu"))
    error(r, 403, "forbidden", "target")
    error(await best(client, graph), 404, "no_decision", "graph_id")

    await decide(client, body, **auth("a"))
    await decide(client, body, **auth("b"))
    agreed = await best_json(client, graph, min_writers=2)
    assert (agreed["config"], agreed["writers"]) == (ROWS[0], 2)

    store = MeasurementStore.open(default_sqlite_url(model_dir.parent / "data"))
    try:
        store.writers.revoke("b")  # not a write: served until the entry is reread
        await decide(client, decision(graph, ROWS[2], compiler="c"), **auth("a"))
        after = await best_json(client, graph)
        assert after["writers"] == 1
        error(await best(client, graph, min_writers=2), 404, "no_decision", "graph_id")
        assert store.decisions.counts() == {("xla_cpu", "xla_cpu", TARGET): 3}
    finally:
        store.close()


async def test_anonymous_decisions_are_not_served_once_tokens_are_required(
    make_client: AppClient,
) -> None:
    open_ = await make_client(feedback_auth="off", **QUIET)
    graph = await measure(open_, "anonymous")
    await decide(open_, decision(graph, ROWS[0]))
    assert (await best_json(open_, graph))["config"] == ROWS[0]
    closed = await make_client(feedback_auth="token", **QUIET)  # same database
    error(await best(closed, graph), 404, "no_decision", "graph_id")


async def test_decisions_beyond_the_quota_are_429_and_not_stored(
    make_client: AppClient, model_dir: Path
) -> None:
    client = await make_client(feedback_auth="token", feedback_quota_rows=40, **QUIET)
    auth = Writers(model_dir, "q")
    graph = await measure(client, "quota", auth("q"))  # 1 row
    for compiler in ("c1", "c2"):  # 1 + 16 rows each: 35 of 40
        await decide(client, decision(graph, ROWS[0], compiler=compiler), **auth("q"))
    r = await client.post(
        "/v1/decisions", json=decision(graph, ROWS[1], compiler="c3"), headers=auth("q")
    )
    error(r, 429, "quota_exceeded", None)
    assert int(r.headers["retry-after"]) >= 1
    for k in range(5):  # kept defaults, 1 row each, up to the quota
        await decide(client, kept(graph, compiler=f"k{k}"), **auth("q"))
    r = await client.post(
        "/v1/decisions", json=kept(graph, compiler="k9"), headers=auth("q")
    )
    error(r, 429, "quota_exceeded", None)
    answer = await best_json(client, graph, compiler="c3")
    assert answer["stale"] is True and answer["compiler"] != "c3"


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
    graph = await measure(client, "hot")
    await decide(client, decision(graph, ROWS[0]))
    await best_json(client, graph)  # reads the graph's decisions once
    error(await best(client, gid("cold")), 404, "no_decision", "graph_id")
    before = await settled(client)
    for _ in range(25):
        assert (await best_json(client, graph))["config"] == ROWS[0]
        error(await best(client, gid("cold")), 404, "no_decision", "graph_id")
    assert await statements(client) == before
    # This process knows its own write at once (the newer replaces the older).
    await decide(client, decision(graph, ROWS[1]))
    assert (await best_json(client, graph))["config"] == ROWS[1]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_program_is_found_by_its_hlo_fingerprint_statement_free(
    make_client: AppClient, request: pytest.FixtureRequest, backend: str
) -> None:
    """``jit`` asks by the fingerprint of the HLO text (no featurizing): the answer
    is the graph's, and once the fingerprint is known it costs no statement; until
    a decision of the target is stored."""
    client = await make_client(**await _backend(request, backend))
    if backend == "postgresql":
        await live(client)
    graph, fingerprint = await measure(client, "printed"), gid("printed-hlo")
    await decide(client, decision(graph, ROWS[2], hlo_fingerprint=fingerprint))
    params = {"model": "xla_cpu", "hlo_fingerprint": fingerprint}
    r = await client.get("/v1/best", params=params)
    assert r.status_code == 200, r.text
    assert r.json()["graph_id"] == graph and r.json()["config"] == ROWS[2]
    before = await settled(client)
    for _ in range(10):
        assert (await client.get("/v1/best", params=params)).status_code == 200
    assert await statements(client) == before
    # A decision of another graph naming the fingerprint joins its pool at once.
    other = await measure(client, "printed-too")
    await decide(client, decision(other, ROWS[3], hlo_fingerprint=fingerprint))
    r = await client.get("/v1/best", params=params)
    assert r.json()["graph_id"] == other and r.json()["config"] == ROWS[3]
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
    graph = await measure(client, "same")
    for i, (compiler, low) in enumerate(
        (("c1", 1.1), ("c1", 1.3), ("c2", 1.2), (None, 1.4), ("c2", 1.2))
    ):
        await decide(
            client,
            decision(
                graph, ROWS[i % 3], compiler=compiler, paired_runtimes_ns=pairs(low)
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
    graph = await measure(a, "replicas")
    error(await best(b, graph), 404, "no_decision", "graph_id")  # b caches "none"
    await decide(a, decision(graph, ROWS[0]))
    with anyio.fail_after(10):  # b's cached "none" is trusted 60 s unless told
        while (await best(b, graph)).status_code != 200:
            await anyio.sleep(0.01)
    await decide(a, decision(graph, ROWS[1]))
    with anyio.fail_after(10):
        while (await best_json(b, graph))["config"] != ROWS[1]:
            await anyio.sleep(0.01)


async def test_targets_count_decisions(make_client: AppClient) -> None:
    client = await make_client(fleet_refresh_s=0.1)
    t1 = await measure(client, "t1")
    t2 = await measure(client, "t2", target="cpu-other")
    await decide(client, decision(t1, ROWS[0]))
    await decide(client, decision(t2, ROWS[0], target="cpu-other"))
    with anyio.fail_after(10):
        while True:
            targets = (await client.get("/v1/targets")).json()["targets"]
            counts = {t["target"]: t["decisions"] for t in targets}
            if counts == {TARGET: 1, "cpu-other": 1}:
                break
            await anyio.sleep(0.05)


def test_rows_are_distinct() -> None:
    assert len(np.unique(np.asarray(ROWS), axis=0)) == len(ROWS)


# -- the decision cache -----------------------------------------------------------


def stored(config: np.ndarray[Any, Any], i: int = 0) -> StoredDecision:
    return StoredDecision(
        id=i,
        decided_at=datetime.now(UTC),
        model="layout",
        model_version="1",
        compiler=None,
        graph_id=gid(str(i)),
        hlo_fingerprint=None,
        config=config,
        compiler_options={},
        speedup=1.2,
        speedup_low=1.1,
        speedup_high=1.3,
        p_value=0.01,
        pairs=8,
        budget=8,
        strategy="model",
        kept_default=False,
        writer=f"w{i}",
    )


async def test_the_decision_cache_is_bounded_in_bytes() -> None:
    """Was: bounded in entries only (16,384 graphs), +16.7 MB per graph kept."""
    cache = DecisionCache(lambda: 60.0, capacity_bytes=1 << 20)
    wide = tuple(stored(np.zeros((1000, 18), np.float32), i) for i in range(5))
    assert weigh(wide) >= 5 * 72_000  # its rows' bytes, at least
    reads = []

    def reader(value: tuple[StoredDecision, ...]) -> Any:
        async def read() -> tuple[StoredDecision, ...]:
            reads.append(value)
            return value

        return read

    for i in range(10):  # 360 KB each: two fit in 1 MiB
        await cache.decisions(DecisionKey.graph("layout", "t", str(i)), reader(wide))
        assert cache.used_bytes <= 1 << 20
    assert len(cache) == 2
    huge = wide * 4  # heavier than the whole bound: returned, never kept
    assert await cache.decisions(DecisionKey.graph("layout", "t", "x"), reader(huge))
    assert len(cache) == 2 and cache.used_bytes <= 1 << 20
    # Fingerprint answers of a target go with any decision of the target.
    small = (stored(np.zeros((1, 18), np.float32)),)
    mine = DecisionKey.fingerprint("layout", "t", "f" * 64)
    elsewhere = DecisionKey.fingerprint("layout", "u", "f" * 64)
    for key in (mine, elsewhere):
        await cache.decisions(key, reader(small))
    before = len(reads)
    cache.heard(DecisionsWritten("layout", "t", gid("some graph")), "local")
    for key in (mine, elsewhere):
        await cache.decisions(key, reader(small))
    assert len(reads) == before + 1  # mine was read again, elsewhere's was kept
