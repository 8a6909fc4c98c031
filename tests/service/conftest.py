"""Fixtures for the service tests: the shipped artifacts, real graphs, the app in
process (lifespan run), and the service as a real uvicorn process.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from servicekit import (
    ADMIN,
    ARTIFACTS,
    SERVE,
    SMALL_LAYOUT,
    TILE,
    UNET,
    AppClient,
    make_settings,
)

from xla_costmodel.harness import ServiceServer, set_version
from xla_costmodel.service.app import create_app
from xla_costmodel.tpugraphs.arrays import Sample
from xla_costmodel.tpugraphs.reader import load_npz


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def shipped() -> Path:
    """The real exported artifacts (models/artifacts/{tile,layout,xla_cpu}/<version>/)."""
    for name in ("tile", "layout", "xla_cpu"):
        if not (ARTIFACTS / name).is_dir():
            pytest.fail(f"shipped artifacts missing: {ARTIFACTS / name}")
    return ARTIFACTS


@pytest.fixture(scope="session")
def unet(shared_data: Path) -> Sample:
    """The real unet_3d layout graph: 3163 nodes, 62 configurable, 1965 configs."""
    return load_npz(shared_data / UNET)


@pytest.fixture(scope="session")
def small_layout(shared_data: Path) -> Sample:
    """A real layout graph small enough for JSON bodies: 490 nodes, 38 configurable."""
    return load_npz(shared_data / SMALL_LAYOUT)


@pytest.fixture(scope="session")
def kernel(shared_data: Path) -> Sample:
    """A real tile kernel with 579 configs."""
    return load_npz(shared_data / TILE)


@pytest.fixture
def model_dir(tmp_path: Path, shipped: Path) -> Path:
    """A private copy of the shipped artifacts (every default model), version 1 of each."""
    root = tmp_path / "artifacts"
    for name in ("tile", "layout", "xla_cpu"):
        newest = max(
            (p for p in (shipped / name).iterdir() if p.name.isdigit()),
            key=lambda p: int(p.name),
        )
        shutil.copytree(newest, root / name / "1")
        set_version(root / name / "1", "1")
    return root


@pytest.fixture
async def make_client(model_dir: Path) -> AsyncIterator[AppClient]:
    """``await make_client(**settings)``: the app in process, lifespan entered.

    ``dependency_overrides={dep: replacement}`` swaps a ``service.deps`` accessor.
    """
    stack: list[Any] = []

    async def factory(
        dependency_overrides: dict[Any, Any] | None = None, **overrides: Any
    ) -> httpx.AsyncClient:
        app = create_app(make_settings(**{"model_dir": model_dir, **overrides}))
        app.dependency_overrides.update(dependency_overrides or {})
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://svc"
        )
        stack.append((lifespan, client))
        return client

    yield factory
    for lifespan, client in reversed(stack):
        await client.aclose()
        await lifespan.__aexit__(None, None, None)


@pytest.fixture
async def client(make_client: AppClient) -> httpx.AsyncClient:
    return await make_client()  # type: ignore[no-any-return]


@pytest.fixture
def service_process(
    tmp_path: Path, model_dir: Path, redis_url: str
) -> Iterator[ServiceServer]:
    """The service as a real uvicorn process, with the session's redis-server."""
    env = {
        "COSTMODEL_MODEL_DIR": str(model_dir),
        "COSTMODEL_DATA_DIR": str(tmp_path / "data"),
        "COSTMODEL_REDIS_URL": redis_url,
        "COSTMODEL_REDIS_COOLDOWN_S": "0.2",
        "COSTMODEL_ADMIN_TOKEN": ADMIN,
        "COSTMODEL_LOG_LEVEL": "INFO",
    }
    with ServiceServer(tmp_path, env, argv=SERVE) as server:
        yield server
