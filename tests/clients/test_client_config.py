"""The configured timeouts and limits really reach the transport (habit 8).

httpx drops ``limits=`` silently when a transport is passed, so the client builds
its own transport; these tests look at what the transport actually holds and at
what a real socket does.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from clientfakes import FakeService, silent_server

from xla_costmodel.clients import (
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUT,
    AsyncCostModelClient,
    CostModelClient,
    RetryPolicy,
    ServiceUnavailable,
)
from xla_costmodel.tpugraphs.arrays import Sample

LIMITS = httpx.Limits(
    max_connections=3, max_keepalive_connections=2, keepalive_expiry=7.5
)
TIMEOUT = httpx.Timeout(connect=0.7, read=0.4, write=0.9, pool=0.6)


def _pool_limits(transport: object) -> tuple[int, int, float]:
    pool = transport._pool  # type: ignore[attr-defined]  # httpcore's connection pool
    return (
        pool._max_connections,
        pool._max_keepalive_connections,
        pool._keepalive_expiry,
    )


def test_limits_reach_the_sync_connection_pool() -> None:
    with CostModelClient(limits=LIMITS, timeout=TIMEOUT) as client:
        transport = client._http._transport
        assert isinstance(transport, httpx.HTTPTransport)
        assert _pool_limits(transport) == (3, 2, 7.5)
        assert transport._pool._retries == 0  # retries are the client's policy only
        assert client._http.timeout == TIMEOUT


@pytest.mark.anyio
async def test_limits_reach_the_async_connection_pool() -> None:
    async with AsyncCostModelClient(limits=LIMITS) as client:
        transport = client._http._transport
        assert isinstance(transport, httpx.AsyncHTTPTransport)
        assert _pool_limits(transport) == (3, 2, 7.5)


def test_defaults_are_explicit() -> None:
    with CostModelClient() as client:
        assert _pool_limits(client._http._transport) == (
            DEFAULT_LIMITS.max_connections,
            DEFAULT_LIMITS.max_keepalive_connections,
            DEFAULT_LIMITS.keepalive_expiry,
        )
        assert client._http.timeout == DEFAULT_TIMEOUT


def test_timeouts_reach_each_request_and_are_cut_to_the_deadline(
    tile_sample: Sample,
) -> None:
    fake = FakeService()
    with CostModelClient(
        transport=httpx.MockTransport(fake), timeout=TIMEOUT
    ) as client:
        client.models()
        client.models(deadline=0.5)
    unbounded, bounded = (r.extensions["timeout"] for r in fake.requests)
    assert unbounded == {"connect": 0.7, "read": 0.4, "write": 0.9, "pool": 0.6}
    # read (0.4) fits in the 0.5 s deadline; the other phases are cut to what is left
    assert bounded["read"] == 0.4
    assert all(0.45 < bounded[k] <= 0.5 for k in ("connect", "write", "pool"))


def test_the_read_timeout_is_enforced_by_the_real_socket() -> None:
    """No deadline: the configured 0.4 s read timeout alone bounds each attempt."""
    with (
        silent_server() as url,
        CostModelClient(
            url, timeout=TIMEOUT, retry=RetryPolicy(max_attempts=2, backoff_max=0)
        ) as client,
    ):
        start = time.monotonic()
        with pytest.raises(ServiceUnavailable, match="ReadTimeout"):
            client.models()
        elapsed = time.monotonic() - start
    # two attempts of 0.4 s each; the upper bound leaves room for a loaded CI host
    assert 0.75 <= elapsed < 5.0


def test_injected_transport_is_used_for_every_call(tile_sample: Sample) -> None:
    fake = FakeService()
    with CostModelClient(
        "http://elsewhere:1", transport=httpx.MockTransport(fake)
    ) as c:
        c.rank("tile", tile_sample, tile_sample.configs)
    assert {r.url.host for r in fake.requests} == {"elsewhere"}
    assert fake.requests[0].headers["user-agent"].startswith("costmodel-client/")


def test_the_writer_token_reaches_every_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``token=`` first, else ``COSTMODEL_TOKEN``; sent as a bearer token."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"error": {"code": "not_ready"}})

    monkeypatch.setenv("COSTMODEL_TOKEN", "cmw_from_env")
    retry = RetryPolicy(max_attempts=1)
    for kwargs, want in (
        ({}, "Bearer cmw_from_env"),
        ({"token": "cmw_given"}, "Bearer cmw_given"),
        ({"token": ""}, None),  # explicitly none, whatever the environment says
    ):
        assert _authorization(handler, retry, **kwargs) == want
    monkeypatch.delenv("COSTMODEL_TOKEN")
    assert _authorization(handler, retry) is None


def _authorization(handler: Any, retry: RetryPolicy, **kwargs: Any) -> str | None:
    """The Authorization header a client built with ``kwargs`` sends."""
    sent: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda r: sent.append(r) or handler(r))
    with (
        CostModelClient("http://x", transport=transport, retry=retry, **kwargs) as c,
        pytest.raises(ServiceUnavailable),
    ):
        c.models()
    return sent[-1].headers.get("authorization")
