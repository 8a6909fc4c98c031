"""The target-knowledge refresher ends when the app stops, even right after feedback
woke it (Python 3.11's wait_for could swallow that cancellation and hang shutdown)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio
import pytest

from xla_costmodel.service.core.database import Database
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

    def generation_subscription(self, live: bool) -> None:
        pass

    def generation_error(self, op: str) -> None:
        self.errors.append(op)


class NoGraphs:
    """No measured graph has a summary (the database here holds none)."""

    async def summaries(self, gids: Iterable[str]) -> dict[str, Any]:
        return {}


async def test_a_wake_up_racing_the_stop_does_not_keep_the_refresher_alive(
    tmp_path: Path,
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'k.db'}")
    counts = Counts()
    generations = Generations(None, counts, freshness_s=0.1, alone=True)
    knowledge = TargetKnowledge(db, generations, counts, NoGraphs())
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
