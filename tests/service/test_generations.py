"""Measurement generations (service/core/generations.py): a cache that follows the
events it hears, and the database statements a cached graph's rank costs, on SQLite
and PostgreSQL. How the events reach other processes: test_events.py."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.events import (
    DecisionsWritten,
    MeasurementsWritten,
    Missed,
    WritersChanged,
)
from xla_costmodel.service.core.generations import Generation, Generations
from xla_costmodel.service.metrics import Metrics
from xla_costmodel.service.store import MeasurementBatch, default_sqlite_url
from xla_costmodel.service.store.engine import statements

pytestmark = pytest.mark.anyio
KEY: tuple[str, str, str] = ("layout", "tpu-v3", "g1")
TARGET: tuple[str, str, None] = ("layout", "tpu-v3", None)


class Report:
    """Records what a ``Generations`` reports."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def generation_lookup(self, hit: bool) -> None:
        self.counts["hit" if hit else "read"] += 1

    def generation_invalidated(self, source: str) -> None:
        self.counts[f"invalidated:{source}"] += 1


class Reads:
    """A ``read`` that counts its calls and answers the current generation."""

    def __init__(self) -> None:
        self.calls = 0
        self.value: Generation = (1, 1)

    async def __call__(self) -> Generation:
        self.calls += 1
        return self.value


def cache(trust_s: float = 60.0, entries: int = 16_384) -> Generations:
    return Generations(lambda: trust_s, Report(), entries=entries)


def counts(gens: Generations) -> Counter[str]:
    assert isinstance(gens.events, Report)
    return gens.events.counts


async def current(
    gens: Generations, read: Reads, key: tuple[str, str, str | None] = KEY
) -> Generation:
    return await gens.current(*key, read)


async def test_a_measurement_write_drops_its_graph_and_its_target() -> None:
    gens = cache()
    graph, target, other = Reads(), Reads(), Reads()
    await current(gens, graph)
    await current(gens, target, TARGET)
    await current(gens, other, ("layout", "tpu-v3", "g2"))
    gens.heard(MeasurementsWritten(*KEY), "local")
    for read, key in (
        (graph, KEY),
        (target, TARGET),
        (other, ("layout", "tpu-v3", "g2")),
    ):
        await current(gens, read, key)
    assert (graph.calls, target.calls, other.calls) == (2, 2, 1)
    assert counts(gens)["invalidated:local"] == 1


async def test_writes_to_other_keys_leave_a_graph_cached() -> None:
    gens = cache()
    read = Reads()
    await current(gens, read)
    gens.heard(MeasurementsWritten("layout", "tpu-v3", "other"), "remote")
    gens.heard(MeasurementsWritten("layout", "tpu-v4", "g1"), "remote")
    await current(gens, read)
    assert read.calls == 1


async def test_a_decision_alone_drops_no_generation() -> None:
    """A kept default or a refutation without pairs changes no measurement."""
    gens = cache()
    read = Reads()
    await current(gens, read)
    gens.heard(DecisionsWritten(*KEY), "local")
    await current(gens, read)
    assert read.calls == 1
    assert not any(k.startswith("invalidated") for k in counts(gens))


@pytest.mark.parametrize("event", [WritersChanged(), Missed()])
async def test_writers_changed_and_missed_events_drop_everything(
    event: WritersChanged | Missed,
) -> None:
    gens = cache()
    graphs = [Reads() for _ in range(3)]
    for n, read in enumerate(graphs):
        await current(gens, read, ("layout", f"tpu-v{n}", "g"))
    gens.heard(event, "remote")
    assert len(gens) == 0
    for n, read in enumerate(graphs):
        await current(gens, read, ("layout", f"tpu-v{n}", "g"))
        assert read.calls == 2


async def test_a_value_is_trusted_for_the_bus_bound() -> None:
    gens = cache(trust_s=0.05)
    read = Reads()
    await current(gens, read)
    await current(gens, read)
    await asyncio.sleep(0.06)
    await current(gens, read)
    assert read.calls == 2


async def test_a_read_overtaken_by_a_write_is_not_cached() -> None:
    gens = cache()
    started, release = asyncio.Event(), asyncio.Event()

    async def slow() -> Generation:
        started.set()
        await release.wait()
        return (1, 1)  # read before the write committed

    task = asyncio.create_task(gens.current(*KEY, slow))
    await started.wait()
    gens.heard(MeasurementsWritten(*KEY), "local")
    release.set()
    assert await task == (1, 1)
    read = Reads()
    read.value = (2, 2)
    await current(gens, read)
    assert read.calls == 1


async def test_a_failed_read_caches_nothing() -> None:
    gens = cache()

    async def failing() -> Generation:
        raise OSError("database down")

    with pytest.raises(OSError):
        await gens.current(*KEY, failing)
    read = Reads()
    await current(gens, read)
    assert read.calls == 1


async def test_entries_are_bounded() -> None:
    gens = cache(entries=10)
    read = Reads()
    for n in range(25):
        await current(gens, read, ("layout", "t", f"g{n}"))
    assert len(gens) == 10
    await current(gens, read, ("layout", "t", "g24"))
    await current(gens, read, ("layout", "t", "g0"))
    assert read.calls == 26


# -- statements: a cached graph's rank issues none --------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
async def database(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Database]:
    url = (
        default_sqlite_url(tmp_path)
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    db = Database(url)
    yield db
    db.close()


def measured(gid: str, count: int) -> MeasurementBatch:
    return MeasurementBatch(
        model="tile",
        model_version="1",
        collection="tile",
        target="tpu-v3",
        graph_id=gid,
        configs=np.arange(count * 24, dtype=np.float32).reshape(count, 24),
        runtimes_ns=np.arange(1, count + 1, dtype=np.int64),
        scores=None,
        request_id="r",
        source="feedback",
    )


async def test_a_cached_graph_costs_no_statement(database: Database) -> None:
    gid = "0" * 64
    arrays: dict[str, np.ndarray[Any, Any]] = {
        "node_feat": np.zeros((3, 140), np.float32),
        "node_opcode": np.ones(3, np.uint8),
        "edge_index": np.array([[1, 0], [2, 1]], np.int64),
    }
    await database.run(lambda s: s.save_graph(gid, "tile", arrays))
    await database.run(lambda s: s.add_measurements(measured(gid, 3)))
    sent = await database.run(lambda s: statements(s.engine))
    gens = cache()

    def read() -> Awaitable[Generation]:
        return database.run(lambda s: s.generation("tile", "tpu-v3", gid))

    before = sent.count
    assert await gens.current("tile", "tpu-v3", gid, read) == (3, 3)
    assert sent.count > before  # the counter sees the query
    before = sent.count
    for _ in range(100):
        assert await gens.current("tile", "tpu-v3", gid, read) == (3, 3)
    assert sent.count == before

    await database.run(lambda s: s.add_measurements(measured(gid, 2)))
    gens.heard(MeasurementsWritten("tile", "tpu-v3", gid), "local")
    assert await gens.current("tile", "tpu-v3", gid, read) == (5, 5)


async def test_metrics_count_lookups_and_statements(database: Database) -> None:
    metrics = Metrics()
    sent = await database.run(lambda s: statements(s.engine))
    sent.listen(metrics.stores.db_statement)
    before = sent.count
    gens = Generations(lambda: 1.0, metrics.generations)

    def read() -> Awaitable[Generation]:
        return database.run(lambda s: s.generation("tile", "tpu-v3", "0" * 64))

    for _ in range(3):
        await gens.current("tile", "tpu-v3", "0" * 64, read)
    text = metrics.render().decode()
    assert 'costmodel_generation_lookups_total{outcome="hit"} 2.0' in text
    assert 'costmodel_generation_lookups_total{outcome="read"} 1.0' in text
    assert sent.count > before
    assert f"costmodel_db_statements_total {float(sent.count - before)}" in text
