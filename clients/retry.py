"""Retry policy: when to try again, how long to wait, and the caller's deadline.

The wait before retry ``n`` (0-based) is "full jitter" backoff, uniform in
``[0, min(backoff_max, backoff_base * 2**n)]``, so clients that failed together do
not return together. A ``Retry-After`` from the service replaces it (capped at
``retry_after_max``): the service knows better than our guess. No wait ever runs past
the deadline: if the next attempt could not start before it, the client gives up at
once with ``DeadlineExceeded`` instead of sleeping into certain failure.

The deadline also caps every httpx timeout phase (connect, pool, each socket write
and read). httpx has no whole-request timeout, so an answer already arriving may
land up to one phase after the deadline; it is then returned, not thrown away.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from xla_costmodel.clients.errors import CostModelError, DeadlineExceeded


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently one HTTP exchange is retried."""

    max_attempts: int = 4
    backoff_base: float = 0.05
    backoff_max: float = 2.0
    retry_after_max: float = 30.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if self.backoff_base < 0 or self.backoff_max < 0 or self.retry_after_max < 0:
            raise ValueError("backoff and retry-after bounds must be >= 0")

    def backoff(self, attempt: int) -> float:
        """Jittered wait before retry ``attempt`` (0 = the first retry)."""
        cap = min(self.backoff_max, self.backoff_base * 2.0**attempt)
        return self.rng.uniform(0.0, cap)

    def next_delay(
        self, attempt: int, error: CostModelError, deadline: Deadline
    ) -> float:
        """Seconds to wait before trying again after ``error``; raises when not to retry.

        ``attempt`` counts the attempts made so far (>= 1). Raises ``error`` itself
        when it is final or attempts are spent, and ``DeadlineExceeded`` (caused by
        ``error``) when waiting would overrun the deadline.
        """
        if deadline.expired():
            raise deadline.exceeded() from error
        if not error.retryable or attempt >= self.max_attempts:
            raise error
        if error.retry_after is not None:
            delay = min(error.retry_after, self.retry_after_max)
        else:
            delay = self.backoff(attempt - 1)
        if delay >= deadline.remaining():
            raise deadline.exceeded(f"retrying after {delay:.3g}s") from error
        return delay


@dataclass(frozen=True)
class Deadline:
    """An absolute point on the monotonic clock; ``inf`` when the caller set none."""

    at: float = math.inf
    budget: float | None = None

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        if seconds is None:
            return cls()
        if seconds < 0 or math.isnan(seconds):
            raise ValueError("deadline must be a non-negative number of seconds")
        return cls(time.monotonic() + seconds, seconds)

    @classmethod
    def coerce(cls, value: float | Deadline | None, default: float | None) -> Deadline:
        """A Deadline passes through (so one budget spans several calls)."""
        if isinstance(value, Deadline):
            return value
        return cls.after(default if value is None else value)

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def expired(self) -> bool:
        return self.remaining() <= 0

    def exceeded(self, detail: str = "") -> DeadlineExceeded:
        what = (
            f"deadline of {self.budget:g}s exceeded"
            if self.budget
            else "deadline exceeded"
        )
        return DeadlineExceeded(f"{what} ({detail})" if detail else what)

    def clamp(self, timeout: httpx.Timeout) -> httpx.Timeout:
        """The client's per-phase timeouts, none longer than the time left."""
        left = self.remaining()
        if math.isinf(left):
            return timeout
        left = max(left, 0.001)

        def cap(value: float | None) -> float:
            return left if value is None else min(value, left)

        return httpx.Timeout(
            connect=cap(timeout.connect),
            read=cap(timeout.read),
            write=cap(timeout.write),
            pool=cap(timeout.pool),
        )


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date; None if absent/bad."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
