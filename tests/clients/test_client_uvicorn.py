"""The blocking client against the real service in a real uvicorn process."""

from __future__ import annotations

import httpx
import pytest

from xla_costmodel.clients import (
    CostModelClient,
    EndpointNotFound,
    VersionNotLoaded,
)
from xla_costmodel.tpugraphs.arrays import Sample


def test_rank_upload_cache_and_session(
    live_server: str, tile_sample: Sample, layout_sample: Sample
) -> None:
    with CostModelClient(live_server) as client:
        session = client.session("layout")
        first = session.rank(layout_sample, layout_sample.configs, top_k=10)
        again = session.rank(layout_sample, layout_sample.configs, top_k=10)
        assert first.ranking == again.ranking and again.cache in ("memory", "redis")
        assert (
            not again.uploaded and session.model_version == first.model_version == "1"
        )
        assert len(first.top_k) == 10 and first.top_k == first.ranking[:10]
        tile = client.rank("tile", tile_sample, tile_sample.configs, deadline=10.0)
        assert sorted(tile.ranking) == list(range(tile_sample.num_configs))
        with pytest.raises(VersionNotLoaded):
            client.rank("tile", tile_sample, tile_sample.configs, model_version="99")


def test_feedback_against_the_real_service(
    live_server: str, tile_sample: Sample
) -> None:
    has_route = (
        "/v1/feedback" in httpx.get(f"{live_server}/openapi.json").json()["paths"]
    )
    with CostModelClient(live_server) as client:
        client.rank("tile", tile_sample, tile_sample.configs)
        if has_route:
            stored = client.feedback(
                "tile",
                tile_sample,
                tile_sample.runtimes[:2],
                configs=tile_sample.configs[:2],
            )
            assert stored.stored == 2
        else:
            with pytest.raises(EndpointNotFound):
                client.feedback("tile", tile_sample, [1], config_indices=[0])
