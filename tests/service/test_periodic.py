"""``Periodic``: steps on its interval and on a wake-up, outlives a failing step, and
stops promptly, even when the stop races a wake-up (Python 3.11's wait_for could
swallow that cancellation)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from xla_costmodel.service.core.periodic import Periodic

pytestmark = pytest.mark.anyio


async def test_a_wake_up_runs_the_step_at_once_and_the_interval_after() -> None:
    steps: list[float] = []

    async def step() -> None:
        steps.append(asyncio.get_running_loop().time())

    loop = Periodic("test", 0.05, step)
    loop.start()
    try:
        loop.wake.set()
        await asyncio.sleep(0.01)
        assert len(steps) == 1  # woken: long before the interval
        await asyncio.sleep(0.2)
        assert len(steps) >= 2  # then every interval
    finally:
        await loop.stop()


async def test_at_start_steps_before_the_first_wait() -> None:
    steps: list[int] = []

    async def step() -> None:
        steps.append(1)

    loop = Periodic("test", 60.0, step, at_start=True)
    loop.start()
    await asyncio.sleep(0.01)
    await loop.stop()
    assert steps == [1]


async def test_a_failing_step_is_counted_and_logged_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    async def step() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")

    loop = Periodic("flaky", 0.01, step)
    with caplog.at_level(logging.ERROR):
        loop.start()
        await asyncio.sleep(0.1)
        await loop.stop()
    assert loop.failures == 1
    assert len(calls) >= 2  # the loop went on after the failure
    failed = [r for r in caplog.records if r.exc_info is not None]
    assert len(failed) == 1 and getattr(failed[0], "loop", None) == "flaky"


async def test_a_stop_racing_a_wake_up_ends_the_task_promptly() -> None:
    async def step() -> None:
        pass

    loop = Periodic("racy", 60.0, step)
    for _ in range(50):
        task = loop.start()
        await asyncio.sleep(0)  # waiting for a wake-up or the interval
        loop.wake.set()  # e.g. feedback stored just before shutdown
        task.cancel()  # what stop() does first
        done, _ = await asyncio.wait({task}, timeout=5)
        assert task in done, "the loop kept running after it was cancelled"
        await loop.stop()
