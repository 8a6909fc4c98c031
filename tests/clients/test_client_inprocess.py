"""The async client against the real app in process (ASGITransport, lifespan run)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from xla_costmodel.clients import (
    AsyncCostModelClient,
    EndpointNotFound,
    ModelNotFound,
    prepare_graph,
)
from xla_costmodel.clients.payloads import savez_bytes
from xla_costmodel.service.app import create_app
from xla_costmodel.service.settings import Settings
from xla_costmodel.tpugraphs.arrays import Sample

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.anyio


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[FastAPI]:
    settings = Settings(
        model_dir=REPO / "models" / "artifacts",
        models=["tile", "layout"],
        data_dir=tmp_path / "data",
        feedback_auth="off",  # in process nothing listens: auto would need tokens
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[AsyncCostModelClient]:
    transport = httpx.ASGITransport(app=app)
    async with AsyncCostModelClient("http://costmodel.test", transport=transport) as c:
        yield c


async def test_rank_uploads_then_hits_the_cache(
    client: AsyncCostModelClient, tile_sample: Sample
) -> None:
    first = await client.rank("tile", tile_sample, tile_sample.configs, top_k=5)
    again = await client.rank("tile", tile_sample, tile_sample.configs, top_k=5)
    assert first.uploaded and not again.uploaded
    assert again.cache == "memory" and first.model_version == "1"
    assert sorted(first.ranking) == list(range(tile_sample.num_configs))
    assert first.top_k == first.ranking[:5] and again.ranking == first.ranking
    assert first.scores is not None
    assert np.argsort(first.scores, kind="stable")[0] == first.ranking[0]


async def test_int8_layout_configs_score_like_float32(
    app: FastAPI, client: AsyncCostModelClient, layout_sample: Sample
) -> None:
    configs = layout_sample.configs[:64]
    result = await client.rank("layout", layout_sample, configs)  # sent as int8
    gid = prepare_graph(layout_sample).graph_id
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://costmodel.test"
    ) as raw:
        answer = await raw.post(
            "/v1/rank",
            params={"model": "layout", "graph_id": gid},
            content=savez_bytes({"node_config_feat": configs.astype(np.float32)}),
            headers={"Content-Type": "application/x-npz"},
        )
    assert answer.status_code == 200
    assert result.scores == tuple(answer.json()["scores"])


async def test_errors_and_models_from_the_real_app(
    app: FastAPI, client: AsyncCostModelClient, tile_sample: Sample
) -> None:
    with pytest.raises(ModelNotFound):
        await client.rank("nope", tile_sample, tile_sample.configs)
    models = await client.models()
    assert {(m.name, m.collection) for m in models} == {
        ("tile", "tile"),
        ("layout", "layout"),
    }
    assert await client.ready()
    ranked = await client.rank("tile", tile_sample, tile_sample.configs)
    if "/v1/feedback" in app.openapi()["paths"]:
        assert ranked.ranking_id is not None and len(ranked.ranking_id) == 32
        answer = await client.feedback(
            "tile", tile_sample, [7], config_indices=[0], ranking_id=ranked.ranking_id
        )
        assert answer.stored == 1
        session = client.session("tile")  # indices mean its latest answer
        await session.rank(tile_sample, tile_sample.configs[:3])
        answer = await session.feedback(tile_sample, [9, 8], config_indices=[2, 0])
        assert answer.stored == 2
    else:  # the feedback route is not in the service yet
        with pytest.raises(EndpointNotFound):
            await client.feedback("tile", tile_sample, [7], config_indices=[0])
