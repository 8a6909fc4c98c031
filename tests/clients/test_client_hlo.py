"""The client with HLO text and raw configs: featurized and encoded locally, sent as
arrays, against the real app in process (ASGITransport) and a real uvicorn process."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from xla_costmodel.clients import (
    AsyncCostModelClient,
    CostModelClient,
    Hlo,
    InvalidRequest,
    NodeLayout,
    TileSizes,
    prepare_graph,
)
from xla_costmodel.clients.raw_configs import configs_per_node, is_raw
from xla_costmodel.service.app import create_app
from xla_costmodel.service.settings import Settings
from xla_costmodel.tpugraphs.arrays import Sample
from xla_costmodel.tpugraphs.configs import decode_layout, decode_tiles
from xla_costmodel.tpugraphs.hlo import featurize_hlo

REPO = Path(__file__).resolve().parents[2]
HLO_DIR = REPO / "datasets" / "tpugraphs" / "hlo"
TRANSFORMER = HLO_DIR / "jax" / "transformer_layer_infer.hlo.txt"
TILE_TEXT = HLO_DIR / "tile" / "fusion.191_4ae805e53b8d2b8a.hlo.txt"
UNET_TEXT = HLO_DIR / "unet_3d.4x4.bf16.hlo.txt"


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[FastAPI]:
    settings = Settings(
        model_dir=REPO / "models" / "artifacts",
        models=["tile", "layout"],
        data_dir=tmp_path / "data",
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[AsyncCostModelClient]:
    transport = httpx.ASGITransport(app=app)
    async with AsyncCostModelClient("http://costmodel.test", transport=transport) as c:
        yield c


@pytest.fixture
async def raw_http(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as c:
        yield c


def named_layouts(
    sample: Sample, names: list[str], count: int
) -> list[dict[str, NodeLayout]]:
    ids = sample.graph.node_config_ids
    assert ids is not None
    return [
        {names[node]: layout for node, layout in config.items()}
        for config in decode_layout(sample.configs[:count], ids)
    ]


@pytest.mark.anyio
async def test_rank_a_jax_program_from_its_text(
    client: AsyncCostModelClient, raw_http: httpx.AsyncClient
) -> None:
    text = TRANSFORMER.read_text()
    configs = [
        {"dot.9": NodeLayout(output=[1, 0]), "dot.10": {"output": [0, 1]}},
        {"dot.9": NodeLayout(output=[0, 1], input=[1, 0])},
        {},
    ]
    result = await client.rank("layout", Hlo(text), configs, top_k=2)
    assert result.uploaded and result.cache == "miss"  # sent inline, encoded now
    assert sorted(result.ranking) == [0, 1, 2] and len(result.top_k) == 2
    # The service featurizes the same text to the same id, and finds it cached.
    answer = await raw_http.put(
        "/v1/graphs?model=layout",
        content=text.encode(),
        headers={"content-type": "text/x-hlo"},
    )
    assert answer.json()["graph_id"] == result.graph_id and answer.json()["cached"]
    again = await client.rank("layout", str(TRANSFORMER), configs)  # a .hlo.txt path
    assert not again.uploaded and again.scores == result.scores


@pytest.mark.anyio
async def test_raw_tile_configs_rank_like_the_real_arrays(
    client: AsyncCostModelClient, tile_sample: Sample
) -> None:
    by_arrays = await client.rank("tile", tile_sample, tile_sample.configs)
    raw = decode_tiles(tile_sample.configs)
    by_text = await client.rank("tile", TILE_TEXT, raw)  # Path, TileSizes
    assert by_text.graph_id == by_arrays.graph_id and not by_text.uploaded
    assert by_text.scores == by_arrays.scores
    as_dicts = [dataclasses.asdict(t) for t in raw[:10]]
    by_dicts = await client.rank("tile", Hlo(TILE_TEXT.read_text()), as_dicts)
    assert by_arrays.scores is not None
    assert by_dicts.scores == by_arrays.scores[:10]


@pytest.mark.anyio
async def test_raw_layout_configs_by_name_rank_like_the_real_arrays(
    client: AsyncCostModelClient, layout_sample: Sample
) -> None:
    text = UNET_TEXT.read_text()
    names = featurize_hlo(text).node_names
    raw = named_layouts(layout_sample, names, 100)
    by_text = await client.rank("layout", Hlo(text), raw)
    by_arrays = await client.rank("layout", layout_sample, layout_sample.configs[:100])
    assert by_text.graph_id == by_arrays.graph_id and not by_arrays.uploaded
    assert by_text.scores == by_arrays.scores
    ids = layout_sample.graph.node_config_ids
    assert ids is not None
    by_id = decode_layout(layout_sample.configs[:5], ids)  # the npz graph: ids only
    assert (await client.rank("layout", layout_sample, by_id)).scores == (
        by_arrays.scores or ()
    )[:5]


@pytest.mark.anyio
async def test_explicit_configurable_and_upload(
    client: AsyncCostModelClient, raw_http: httpx.AsyncClient
) -> None:
    text = TRANSFORMER.read_text()
    hlo = Hlo(text, configurable=["dot.9", "dot.12"])
    info = await client.upload_graph("layout", hlo)
    assert info.configurable_nodes == 2 and not info.cached
    answer = await raw_http.put(
        "/v1/graphs?model=layout&configurable=dot.9,dot.12",
        content=text.encode(),
        headers={"content-type": "text/x-hlo"},
    )
    assert answer.json()["graph_id"] == info.graph_id and answer.json()["cached"]
    result = await client.rank("layout", hlo, [{"dot.12": {"output": [1, 0]}}, {}])
    assert result.graph_id == info.graph_id and not result.uploaded
    with pytest.raises(InvalidRequest) as err:  # "auto" cannot tell tile from layout
        await client.upload_graph("layout", Hlo(text))
    assert err.value.field == "configurable"


def test_prepared_hlo_matches_the_real_npz(
    tile_sample: Sample, layout_sample: Sample
) -> None:
    tile = prepare_graph(Hlo(TILE_TEXT.read_text(), configurable=None))
    assert tile.graph_id == prepare_graph(tile_sample).graph_id
    layout = prepare_graph(Hlo.read(UNET_TEXT, configurable="default"))
    assert layout.graph_id == prepare_graph(layout_sample).graph_id
    assert layout.node_names is not None and layout.config_tensor_ranks is not None
    assert len(layout.config_tensor_ranks) == 62
    # "auto" follows the configs: tile ones make a tile graph.
    auto = prepare_graph(TILE_TEXT, [TileSizes([1], [1], [1])])
    assert auto.graph_id == tile.graph_id


BROKEN = "HloModule m\n\nENTRY e {\n  ROOT a = f32[2 parameter(0)\n}\n"


def test_bad_inputs_fail_locally_with_the_line_or_the_field() -> None:
    with CostModelClient(
        "http://costmodel.test", transport=httpx.MockTransport(_models_only)
    ) as client:
        with pytest.raises(InvalidRequest) as bad_text:
            client.rank("tile", BROKEN, [TileSizes([1])])
        assert bad_text.value.field == "hlo" and "line 4:" in str(bad_text.value)
        with pytest.raises(InvalidRequest) as bad_tile:
            client.rank("tile", TILE_TEXT, [TileSizes([1]), {"kernel_bounds": [0]}])
        assert bad_tile.value.field == "configs[1].kernel_bounds[0]"
        with pytest.raises(InvalidRequest) as bad_dims:
            client.rank("layout", TRANSFORMER, [{"dot.9": {"output": [0, 5]}}])
        assert bad_dims.value.field == "configs[0].dot.9.output"
        with pytest.raises(InvalidRequest) as bad_name:
            client.rank("layout", TRANSFORMER, [{"nope.1": {"output": [0]}}])
        assert bad_name.value.field == "configs[0].nope.1"
        with pytest.raises(InvalidRequest) as bad_path:
            client.rank("layout", HLO_DIR / "missing.hlo.txt", [{}])
        assert bad_path.value.field == "graph"


def _models_only(request: httpx.Request) -> httpx.Response:
    """The models' collections, and nothing else: the rest fails before it is sent."""
    if (request.method, request.url.path) == ("GET", "/v1/models"):
        names = ("tile", "layout")
        models = [{"name": n, "collection": n, "version": "1"} for n in names]
        return httpx.Response(200, json={"models": models})
    raise AssertionError(f"nothing should be sent, got {request.method} {request.url}")


def test_raw_or_arrays() -> None:
    assert is_raw([TileSizes()]) and is_raw([{}]) and not is_raw([])
    assert not is_raw(np.zeros((2, 24))) and not is_raw([[0.0] * 24])
    assert configs_per_node([{"kernel_bounds": [1]}]) is False
    assert configs_per_node([{"dot.1": {"output": [0]}}, {}]) is True
    assert configs_per_node(np.zeros((2, 24))) is False
    assert configs_per_node(np.zeros((2, 3, 18))) is True
    assert configs_per_node([1, 2]) is None


def test_sync_client_against_uvicorn(live_server: str, tile_sample: Sample) -> None:
    with CostModelClient(live_server) as client:
        raw = decode_tiles(tile_sample.configs[:20])
        result = client.rank("tile", TILE_TEXT, raw, top_k=3)
        by_arrays = client.rank("tile", tile_sample, tile_sample.configs[:20])
    assert result.graph_id == by_arrays.graph_id
    assert result.scores == by_arrays.scores and len(result.top_k) == 3
