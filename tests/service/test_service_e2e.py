"""End to end: the service as a real uvicorn process, with a real redis-server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from servicekit import ADMIN, NPZ, graph_npz, npz_bytes

from xla_costmodel.harness import ServiceServer, add_version
from xla_costmodel.runner import ArtifactRunner
from xla_costmodel.tpugraphs.arrays import Sample

pytestmark = pytest.mark.slow


def rank_npz(url: str, sample: Sample, graph_id: str | None = None) -> httpx.Response:
    """Rank all configs: by graph_id, or with the graph in the same npz body."""
    configs = {"node_config_feat": sample.configs.astype(np.int8)}
    if graph_id is None:
        return httpx.post(
            f"{url}/v1/rank?model=layout&top_k=10",
            content=graph_npz(sample, **configs),
            headers=NPZ,
            timeout=30,
        )
    return httpx.post(
        f"{url}/v1/rank?model=layout&top_k=10&graph_id={graph_id}",
        content=npz_bytes(**configs),
        headers=NPZ,
        timeout=30,
    )


def test_cache_levels_across_restarts_and_a_redis_outage(
    service_process: ServiceServer, redis_server: Any, model_dir: Path, unet: Sample
) -> None:
    url = service_process.url
    cold = rank_npz(url, unet)
    assert cold.status_code == 200 and cold.json()["cache"] == "miss"
    gid = cold.json()["graph_id"]
    warm = rank_npz(url, unet, gid)
    assert warm.json()["cache"] == "memory"

    runner = ArtifactRunner(model_dir / "layout" / "1")
    want = runner.score(runner.encode(unet.graph), unet.configs)
    np.testing.assert_allclose(cold.json()["scores"], want, rtol=1e-6, atol=1e-6)
    assert cold.json()["ranking"] == np.argsort(want, kind="stable").tolist()

    service_process.stop()
    service_process.start()
    shared = rank_npz(url, unet, gid)  # a fresh process: found in Redis
    assert shared.json()["cache"] == "redis"
    assert shared.json()["ranking"] == cold.json()["ranking"]
    assert rank_npz(url, unet, gid).json()["cache"] == "memory"

    redis_server.stop()
    try:
        again = rank_npz(url, unet, gid)
        assert again.status_code == 200 and again.json()["cache"] == "memory"
        service_process.stop()
        service_process.start()  # starts and serves with Redis down
        missing = rank_npz(url, unet, gid)
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "graph_not_found"
        inline = rank_npz(url, unet)
        assert inline.status_code == 200 and inline.json()["cache"] == "miss"
        assert inline.json()["ranking"] == cold.json()["ranking"]
        metrics = httpx.get(f"{url}/metrics").text
        assert 'costmodel_cache_errors_total{level="redis"' in metrics
    finally:
        redis_server.start()


def test_hot_reload_over_http(
    service_process: ServiceServer, model_dir: Path, unet: Sample
) -> None:
    url = service_process.url
    auth = {"authorization": f"Bearer {ADMIN}"}
    add_version(model_dir, "layout", "2", corrupt="truncate")
    bad = httpx.post(f"{url}/v1/models/layout/reload", headers=auth)
    assert bad.status_code == 409 and bad.json()["error"]["code"] == "reload_failed"
    served = rank_npz(url, unet)
    assert served.status_code == 200 and served.json()["model_version"] == "1"

    add_version(model_dir, "layout", "3")
    good = httpx.post(f"{url}/v1/models/layout/reload", headers=auth, timeout=30)
    assert good.status_code == 200, good.text
    assert good.json()["version"] == "3" and good.json()["loaded_versions"] == [
        "1",
        "3",
    ]
    after = rank_npz(url, unet)
    assert after.json()["model_version"] == "3" and after.json()["cache"] == "miss"
    assert (
        after.json()["ranking"] == served.json()["ranking"]
    )  # same weights, new version
    assert httpx.get(f"{url}/readyz").status_code == 200
