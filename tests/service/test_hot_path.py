"""The rank path without a database round trip: a rank of a known graph whose
measurements did not change sends no statement (counted by the service itself,
``costmodel_db_statements_total``), and a measurement acknowledged by one process
shapes another's next rank through the Redis notification (the bound itself,
``staleness_ms``, is measured by ``costmodel bench``, not asserted here).

Counting statements needs the background quiet: the knowledge refresher's timer is
set past the test and the test awaits the refresh the feedback woke
(``TargetKnowledge.refreshed``), rather than a quiet period, which a refit slowed by
a busy machine (or the refresher's 1 s tick) could outlast."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from servicekit import AppClient, make_settings, metric, program

from xla_costmodel.service.app import create_app
from xla_costmodel.service.core.build import Core
from xla_costmodel.service.core.fleet import EMPTY
from xla_costmodel.tpugraphs import xla_cpu2

pytestmark = pytest.mark.anyio
CONFIGS = xla_cpu2.sample(24, seed=3)
# Generous: a loaded 2-core CI machine; far below the 60 s fallback trust.
WAIT_S = 10.0


async def rank(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    r = await client.post(
        "/v1/rank", json={"model": "xla_cpu", "configs": CONFIGS.tolist(), **body}
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


async def feed(client: httpx.AsyncClient, gid: str, rows: slice, seed: int) -> None:
    runtimes = np.random.default_rng(seed).integers(
        1_000, 9_000, rows.stop - rows.start
    )
    r = await client.post(
        "/v1/feedback",
        json={
            "model": "xla_cpu",
            "graph_id": gid,
            "configs": CONFIGS[rows].tolist(),
            "runtimes_ns": runtimes.tolist(),
        },
    )
    assert r.status_code == 200, r.text


async def statements(client: httpx.AsyncClient) -> float:
    return metric((await client.get("/metrics")).text, "costmodel_db_statements_total")


async def live(client: httpx.AsyncClient) -> None:
    """Until the app's invalidation subscription is up (Redis pub/sub)."""
    with anyio.fail_after(10):
        while not metric(
            (await client.get("/metrics")).text, "costmodel_generation_subscribed"
        ):
            await anyio.sleep(0.02)


Served = tuple[FastAPI, httpx.AsyncClient]


@pytest.fixture
async def serve(model_dir: Path) -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    """``await serve(**settings)``: the app in process (lifespan entered) and a
    client, like ``make_client``, with the app itself: its core's refresher."""
    entered: list[tuple[Any, httpx.AsyncClient]] = []

    async def factory(**overrides: Any) -> Served:
        app = create_app(make_settings(**{"model_dir": model_dir, **overrides}))
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://svc"
        )
        entered.append((lifespan, client))
        return app, client

    yield factory
    for lifespan, client in reversed(entered):
        await client.aclose()
        await lifespan.__aexit__(None, None, None)


async def quiet(app: FastAPI) -> None:
    """Until nothing in the background sends a statement: the fleet summary's first
    refresh (at start) has ended, and so has a knowledge refresh begun after every
    wake-up so far (the feedback's: its refit reads the target's rows)."""
    core: Core = app.state.core
    with anyio.fail_after(30):
        while core.fleet.snapshot is EMPTY:
            await anyio.sleep(0.01)
        await core.knowledge.refreshed()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_rank_of_a_known_graph_sends_no_statement(
    serve: Callable[..., Awaitable[Served]],
    backend: str,
    request: pytest.FixtureRequest,
) -> None:
    # No timer inside the test: only a wake-up (the feedback) refreshes, and the
    # test awaits that refresh. The retention sweep waits an hour before its first.
    overrides: dict[str, Any] = {
        "knowledge_refresh_s": 3600.0,
        "fleet_refresh_s": 3600.0,
    }
    if backend == "postgresql":  # shared by replicas: only notification keeps it fresh
        overrides |= {
            "database_url": request.getfixturevalue("postgres_url"),
            "redis_url": request.getfixturevalue("redis_url"),
        }
    app, client = await serve(**overrides)
    if backend == "postgresql":
        await live(client)
    gid = (await rank(client, graph=program(7)))["graph_id"]
    await feed(client, gid, slice(0, 6), seed=1)
    assert (await rank(client, graph_id=gid))["adapted"] == 6
    await quiet(app)
    before = await statements(client)
    assert before > 0  # the counter counts: the writes above were statements
    for _ in range(20):
        assert (await rank(client, graph_id=gid))["adapted"] == 6
    assert await statements(client) == before
    # This process knows its own writes at once: the next rank sees them.
    await feed(client, gid, slice(6, 12), seed=2)
    assert (await rank(client, graph_id=gid))["adapted"] == 12


async def test_another_process_sees_an_acknowledged_write_through_the_notification(
    make_client: AppClient, postgres_url: str, redis_url: str
) -> None:
    """Behaviour, not a bound (the bound is the bench's ``staleness_ms``): with the
    fallback trust set to a minute, only the Redis notification can make ``b`` see
    ``a``'s write within the test's generous wait."""
    shared = {"database_url": postgres_url, "redis_url": redis_url, "freshness_s": 60.0}
    a, b = await make_client(**shared), await make_client(**shared)
    await live(a)
    await live(b)
    gid = (await rank(a, graph=program(11)))["graph_id"]
    assert (await rank(b, graph=program(11)))["adapted"] == 0  # b caches "nothing"
    for trial in range(3):  # 6 more measured configs each (above the minimum)
        await feed(a, gid, slice(6 * trial, 6 * trial + 6), seed=trial)
        acked = time.monotonic()
        while (await rank(b, graph_id=gid))["adapted"] != 6 * trial + 6:
            assert time.monotonic() - acked < WAIT_S, "b never saw the write"
            await anyio.sleep(0.01)
