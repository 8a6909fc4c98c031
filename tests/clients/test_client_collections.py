"""The client learns a model's collection by its name from ``GET /v1/models``: once
per client, again after an answer that says the model changed, and never from the
width of its configs."""

from __future__ import annotations

import dataclasses
import io
import json

import httpx
import numpy as np
import pytest
from clientfakes import FakeService

from xla_costmodel.clients import (
    CostModelClient,
    InvalidRequest,
    ModelNotFound,
    VersionNotLoaded,
)
from xla_costmodel.clients.payloads import config_array, configs_npz, prepare_graph
from xla_costmodel.tpugraphs import xla_cpu2
from xla_costmodel.tpugraphs.arrays import Sample
from xla_costmodel.tpugraphs.collections import TILE, XLA_CPU


class Counting(httpx.BaseTransport):
    """The real HTTP transport, counting the ``GET /v1/models`` it carries."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport(retries=0)
        self.models = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.models += (request.method, request.url.path) == ("GET", "/v1/models")
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def test_one_models_request_per_client_against_uvicorn(
    live_server: str, tile_sample: Sample, layout_sample: Sample
) -> None:
    counting = Counting()
    with CostModelClient(live_server, transport=counting) as client:
        for _ in range(3):
            client.rank("tile", tile_sample, tile_sample.configs[:50])
            client.rank("layout", layout_sample, layout_sample.configs[:20])
        client.feedback(
            "tile",
            tile_sample,
            tile_sample.runtimes[:2],
            configs=tile_sample.configs[:2],
        )
        assert counting.models == 1  # one answer listed both models
        assert client.collections.get("layout") == "layout"
        with pytest.raises(ModelNotFound):  # not listed: asked again, then refused
            client.rank("nope", tile_sample, tile_sample.configs)
        assert counting.models == 2
        with pytest.raises(VersionNotLoaded):  # the model changed: forgotten
            client.rank("tile", tile_sample, tile_sample.configs, model_version="99")
        assert client.collections.get("tile") is None
        client.rank("tile", tile_sample, tile_sample.configs[:50])
        assert counting.models == 3 and client.collections.get("tile") == "tile"


def test_the_payload_follows_the_models_collection_not_its_name(
    tile_sample: Sample,
) -> None:
    """A model named ``tile`` that the service lists as xla_cpu gets xla_cpu rows
    (int8 bits under ``config_feat``); tile rows are refused before they are sent."""
    fake = FakeService({"tile": "xla_cpu"})
    with CostModelClient(transport=httpx.MockTransport(fake)) as client:
        client.rank("tile", tile_sample.graph, xla_cpu2.sample(5, 0))
        with np.load(io.BytesIO(fake.ops[-1].content)) as sent:
            assert sent["config_feat"].shape == (5, xla_cpu2.WIDTH)
            assert sent["config_feat"].dtype == np.int8
        with pytest.raises(InvalidRequest) as info:
            client.rank("tile", tile_sample.graph, tile_sample.configs)
        assert info.value.field == "config_feat" and len(fake.ops) == 1
        # A refusal may mean the model changed: the next call asks again.
        assert client.collections.get("tile") is None
        client.rank("tile", tile_sample.graph, xla_cpu2.sample(2, 1))
    assert fake.paths().count("GET /v1/models") == 2


def test_two_collections_of_one_width_are_told_apart_by_name(
    tile_sample: Sample,
) -> None:
    """Nothing infers a collection from a width any more: a collection as wide as
    tile but of small int configs sends int8 where tile sends float32."""
    twin = dataclasses.replace(XLA_CPU, name="xla_cpu", width=TILE.width)
    graph = prepare_graph(tile_sample.graph)
    rows = np.ones((3, TILE.width), np.float32)
    wire = {}
    for spec in (TILE, twin):
        body = configs_npz(config_array(rows, graph, TILE), graph, spec)
        with np.load(io.BytesIO(body)) as sent:
            wire[spec.small_int_configs] = sent[spec.config_key].dtype
    assert wire == {False: np.float32, True: np.int8}


def test_a_handful_of_configs_by_id_goes_as_json(tile_sample: Sample) -> None:
    """A known graph and a few configs: a JSON body (the npz codec costs more than
    it saves there); the first rank carries the graph inline, and larger batches go
    as npz, the answer the same either way."""
    fake = FakeService()
    with CostModelClient(transport=httpx.MockTransport(fake)) as client:
        first = client.rank("tile", tile_sample.graph, tile_sample.configs[:2])
        small = client.rank("tile", tile_sample.graph, tile_sample.configs[:2], top_k=1)
        large = client.rank("tile", tile_sample.graph, tile_sample.configs[:10])
    inline, by_id, batch = fake.ops
    assert inline.headers["content-type"] == "application/x-npz"
    assert by_id.headers["content-type"] == "application/json"
    sent = json.loads(by_id.content)
    assert sent == {
        "model": "tile",
        "graph_id": first.graph_id,
        "top_k": 1,
        "configs": tile_sample.configs[:2].tolist(),
    }
    assert not by_id.url.params  # nothing in the query
    assert batch.headers["content-type"] == "application/x-npz"
    assert list(small.top_k) == list(first.top_k[:1])
    assert len(large.ranking) == 10 and large.graph_id == first.graph_id
