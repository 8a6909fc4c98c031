"""The target-knowledge refresher: woken only by the events that change a fit, and
ended when the app stops, even right after feedback woke it (Python 3.11's wait_for
could swallow that cancellation and hang shutdown)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio
import pytest

from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.events import (
    DecisionsWritten,
    Event,
    MeasurementsWritten,
    Missed,
    WritersChanged,
)
from xla_costmodel.service.core.generations import Generations
from xla_costmodel.service.core.knowledge import TargetKnowledge

pytestmark = pytest.mark.anyio


class Counts:
    """What the refresher reports, counted (the service's Metrics does the same)."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def store_error(self, op: str) -> None:
        self.errors.append(op)

    def knowledge_fitted(self, model: str, seconds: float, programs: int) -> None:
        pass

    def generation_lookup(self, hit: bool) -> None:
        pass

    def generation_invalidated(self, source: str) -> None:
        pass


class NoGraphs:
    """No measured graph has a summary (the database here holds none)."""

    async def summaries(self, gids: Iterable[str]) -> dict[str, Any]:
        return {}


async def test_a_wake_up_racing_the_stop_does_not_keep_the_refresher_alive(
    tmp_path: Path,
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'k.db'}")
    counts = Counts()
    knowledge = TargetKnowledge(
        db, Generations(lambda: 0.1, counts), counts, NoGraphs()
    )
    refresher = knowledge.refresher(60.0)
    try:
        for _ in range(50):
            task = refresher.start()
            await anyio.sleep(0)  # waiting for a wake-up or the period
            knowledge.touch()  # feedback stored just before shutdown
            task.cancel()  # what stop() does first
            done, _ = await asyncio.wait({task}, timeout=5)
            assert task in done, "the refresher kept running after it was cancelled"
            await refresher.stop()
    finally:
        db.close()


@pytest.mark.parametrize(
    ("event", "wakes"),
    [
        (MeasurementsWritten("xla_cpu", "cpu-x", "g"), True),
        (WritersChanged(), True),  # purged rows, the targets writers may write
        (Missed(), True),
        (DecisionsWritten("xla_cpu", "cpu-x", "g"), False),  # no fit changes
    ],
)
async def test_only_events_that_change_a_fit_wake_the_refresher(
    tmp_path: Path, event: Event, wakes: bool
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'k.db'}")
    counts = Counts()
    knowledge = TargetKnowledge(
        db, Generations(lambda: 0.1, counts), counts, NoGraphs()
    )
    refresher = knowledge.refresher(60.0)  # not started: nothing clears its wake-up
    try:
        knowledge.heard(event, "remote")
        assert refresher.wake.is_set() is wakes
        with anyio.move_on_after(0.1) as waited:  # nothing to wait for: at once
            await knowledge.refreshed()
        assert waited.cancelled_caught is wakes
    finally:
        db.close()
