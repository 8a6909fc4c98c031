"""The pure parts: the error table, the retry policy, the deadline, Retry-After."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime

import httpx
import pytest

from xla_costmodel.clients import (
    ApiError,
    Deadline,
    DeadlineExceeded,
    EndpointNotFound,
    GraphNotFound,
    InvalidRequest,
    RetryPolicy,
    ServiceUnavailable,
    VersionNotLoaded,
)
from xla_costmodel.clients.errors import (
    CostModelError,
    error_from_response,
    error_from_transport,
)
from xla_costmodel.clients.retry import parse_retry_after


def answer(status: int, **body: object) -> httpx.Response:
    return httpx.Response(status, json=body, request=httpx.Request("GET", "http://x/"))


@pytest.mark.parametrize(
    ("status", "code", "cls", "retryable"),
    [
        (404, "graph_not_found", GraphNotFound, False),
        (409, "model_version_not_loaded", VersionNotLoaded, False),
        (413, "payload_too_large", InvalidRequest, False),
        (415, "unsupported_media_type", InvalidRequest, False),
        (400, "malformed_body", InvalidRequest, False),
        (503, "not_ready", ServiceUnavailable, True),
        (429, "overloaded", ServiceUnavailable, True),
        (500, "internal", ServiceUnavailable, False),
        (401, "unauthorized", ApiError, False),
        (409, "reload_failed", ApiError, False),
    ],
)
def test_error_table(status: int, code: str, cls: type, retryable: bool) -> None:
    err = error_from_response(
        answer(status, error={"code": code, "message": "m", "field": "f"}),
        retry_after=None,
    )
    assert type(err) is cls and err.retryable is retryable
    assert (err.status, err.code, err.message, err.field) == (status, code, "m", "f")


def test_framework_404_means_no_such_route() -> None:
    err = error_from_response(answer(404, detail="Not Found"), retry_after=None)
    assert type(err) is EndpointNotFound and err.message == "Not Found"
    plain = httpx.Response(
        502, text="bad gateway", request=httpx.Request("GET", "http://x/")
    )
    err = error_from_response(plain, retry_after=3.0)
    assert type(err) is ServiceUnavailable and err.retryable and err.retry_after == 3.0


def test_transport_errors_retry_only_when_safe() -> None:
    request = httpx.Request("POST", "http://x/")
    never_sent = httpx.ConnectError("refused", request=request)
    lost = httpx.ReadTimeout("slow", request=request)
    assert error_from_transport(never_sent, idempotent=False).retryable
    assert error_from_transport(lost, idempotent=True).retryable
    assert not error_from_transport(lost, idempotent=False).retryable


def test_retry_after_parsing() -> None:
    now = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("Mon, 01 Jan 2024 12:00:30 GMT", now) == 30.0
    assert parse_retry_after("Mon, 01 Jan 2024 11:00:00 GMT", now) == 0.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


def test_backoff_is_full_jitter_capped() -> None:
    policy = RetryPolicy(backoff_base=0.1, backoff_max=0.5, rng=random.Random(0))
    for attempt, cap in [(0, 0.1), (1, 0.2), (2, 0.4), (3, 0.5), (10, 0.5)]:
        draws = [policy.backoff(attempt) for _ in range(200)]
        assert min(draws) >= 0 and max(draws) <= cap and max(draws) > cap * 0.8


def test_next_delay_decisions() -> None:
    policy = RetryPolicy(max_attempts=3, retry_after_max=10)
    never = Deadline()
    busy = ServiceUnavailable("busy", retry_after=60, retryable=True)
    assert policy.next_delay(1, busy, never) == 10  # Retry-After, capped
    with pytest.raises(ServiceUnavailable):
        policy.next_delay(3, busy, never)  # attempts spent
    final = InvalidRequest("no")
    with pytest.raises(InvalidRequest):
        policy.next_delay(1, final, never)
    with pytest.raises(DeadlineExceeded) as info:
        policy.next_delay(1, busy, Deadline.after(5))  # 10 s wait > 5 s left
    assert info.value.__cause__ is busy


def test_deadline() -> None:
    assert Deadline.coerce(None, None).remaining() == float("inf")
    d = Deadline.after(0.05)
    assert Deadline.coerce(d, 9) is d and 0 < d.remaining() <= 0.05
    assert Deadline.coerce(None, 3).budget == 3
    time.sleep(0.06)
    assert d.expired() and "0.05s" in str(d.exceeded())
    with pytest.raises(ValueError):
        Deadline.after(-1)
    assert isinstance(d.exceeded(), CostModelError)


@pytest.mark.parametrize(
    ("status", "idempotent_retry", "once_retry"),
    [(429, True, True), (503, True, True), (502, True, False), (504, True, False)],
)
def test_a_non_idempotent_call_retries_only_what_the_service_refused(
    status: int, idempotent_retry: bool, once_retry: bool
) -> None:
    """A 502/504 comes from a proxy that may have passed the request on: repeating
    a feedback POST could store its runtimes twice. 429/503 are the service's own
    "nothing done"."""
    assert error_from_response(answer(status), None).retryable is idempotent_retry
    got = error_from_response(answer(status), None, idempotent=False).retryable
    assert got is once_retry
