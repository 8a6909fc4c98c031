"""The asyncio client: the same flows, driven with awaits."""

from __future__ import annotations

import time

import httpx
import pytest
from clientfakes import AsyncSlowTransport, FakeService, Sleeps, error, unused_url

from xla_costmodel.clients import (
    AsyncCostModelClient,
    DeadlineExceeded,
    EndpointNotFound,
    RetryPolicy,
    ServiceUnavailable,
)
from xla_costmodel.tpugraphs.arrays import Sample

pytestmark = pytest.mark.anyio


def fake_client(
    fake: FakeService, sleeps: Sleeps, attempts: int = 4
) -> AsyncCostModelClient:
    return AsyncCostModelClient(
        transport=httpx.MockTransport(fake),
        retry=RetryPolicy(max_attempts=attempts),
        sleep=sleeps.asleep,
    )


async def test_rank_sends_the_graph_inline_then_by_id_and_retries_503(
    fake: FakeService, sleeps: Sleeps, layout_sample: Sample
) -> None:
    fake.script = [error(503, "overloaded", retry_after="3")]
    async with fake_client(fake, sleeps) as client:
        result = await client.rank(
            "layout", layout_sample, layout_sample.configs[:20], top_k=2
        )
        again = await client.rank("layout", layout_sample, layout_sample.configs[:20])
    assert sleeps == [3.0]
    # the model's collection once; then inline, inline again, by id
    assert fake.paths() == ["GET /v1/models"] + ["POST /v1/rank"] * 3
    assert [r.url.params.get("graph_id") for r in fake.ops] == [
        None,
        None,
        result.graph_id,
    ]
    assert result.uploaded and len(result.top_k) == 2 and not again.uploaded
    assert (result.cache, again.cache) == ("miss", "memory")


async def test_session_pins_and_feedback(
    fake: FakeService, sleeps: Sleeps, tile_sample: Sample
) -> None:
    async with fake_client(fake, sleeps) as client:
        session = client.session("tile")
        await session.rank(tile_sample, tile_sample.configs)
        fake.versions["tile"].append("2")
        assert (
            await session.rank(tile_sample, tile_sample.configs)
        ).model_version == "1"
        stored = await session.feedback(
            tile_sample, [9], configs=tile_sample.configs[:1]
        )
    assert stored.stored == 1 and fake.feedback_rows[0]["model_version"] == "1"


async def test_connection_refused_falls_back(tile_sample: Sample) -> None:
    async with AsyncCostModelClient(
        unused_url(), retry=RetryPolicy(max_attempts=2)
    ) as client:
        with pytest.raises(ServiceUnavailable):
            await client.rank("tile", tile_sample, tile_sample.configs)
        result = await client.rank(
            "tile", tile_sample, tile_sample.configs, fallback=[2]
        )
        assert not await client.ready()
    assert result.degraded and result.ranking[:2] == (2, 0)


async def test_slow_answer_past_the_deadline(tile_sample: Sample) -> None:
    transport = AsyncSlowTransport(delay=5.0)
    async with AsyncCostModelClient(transport=transport) as client:
        start = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            await client.rank("tile", tile_sample, tile_sample.configs, deadline=0.3)
        result = await client.rank(
            "tile", tile_sample, tile_sample.configs, deadline=0.2, fallback=[]
        )
        elapsed = time.monotonic() - start
    # Upper bound generous: a loaded CI host may be slow; the lower bound is the point.
    assert result.degraded and 0.45 <= elapsed < 5.0
    assert max(transport.timeouts) <= 0.3


async def test_feedback_without_the_route(sleeps: Sleeps, tile_sample: Sample) -> None:
    async with fake_client(FakeService(feedback_route=False), sleeps) as client:
        with pytest.raises(EndpointNotFound):
            await client.feedback("tile", tile_sample, [1], config_indices=[0])
        assert [m.name for m in await client.models()] == ["tile", "layout"]
