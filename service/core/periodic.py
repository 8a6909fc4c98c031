"""One periodic loop: a step every ``interval_s``, or at once when woken.

    Periodic(name, interval_s, step, wake=None, at_start=False)
    await Periodic.run()                 until cancelled (the app's task group)
    Periodic.start() / await .stop()     the same, as a task of the running loop

The fleet summary, the target-knowledge refresher and the retention sweep are one
of these each. A step that raises is logged and counted (``failures``) and the loop
goes on: a bug must not end every later step. Failures a step expects (a database
down) it handles and counts itself.

The wait is ``asyncio.timeout`` around the wake-up event, not ``asyncio.wait_for``:
on Python 3.11 ``wait_for`` can swallow a cancellation that races the wake-up
(feedback stored just before shutdown), and the task would then never end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class Periodic:
    def __init__(
        self,
        name: str,
        interval_s: float,
        step: Callable[[], Awaitable[object]],
        wake: asyncio.Event | None = None,
        at_start: bool = False,
    ) -> None:
        """``wake``: set it to run the step now rather than at the next tick;
        ``at_start``: run the step first, then wait (else wait first)."""
        self.name = name
        self.interval_s = interval_s
        self.step = step
        self.wake = asyncio.Event() if wake is None else wake
        self.at_start = at_start
        self.failures = 0  # steps that raised
        self._task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Step and wait, until cancelled."""
        if not self.at_start:
            await self._wait()
        while True:
            try:
                await self.step()
            except Exception:
                self.failures += 1
                log.exception("periodic step failed", extra={"loop": self.name})
            await self._wait()

    async def _wait(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.interval_s):
                await self.wake.wait()
        self.wake.clear()

    def start(self) -> asyncio.Task[None]:
        """``run`` as a task of the running loop (once)."""
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=self.name)
        return self._task

    async def stop(self) -> None:
        """Cancel the task and wait for it: a step in flight in a worker thread
        finishes first (a thread cannot be interrupted), so whatever it uses is
        never closed under it."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        await asyncio.wait({task})  # an outer cancellation still reaches the caller
        if not task.cancelled():
            task.result()  # what ended it other than the cancellation
