"""Client test fixtures: real TpuGraphs files, the fake service, a recording sleep."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from clientfakes import FakeService, Sleeps

from xla_costmodel.clients import CostModelClient, RetryPolicy
from xla_costmodel.harness import RedisServer, ServiceServer
from xla_costmodel.tpugraphs.arrays import Sample
from xla_costmodel.tpugraphs.reader import load_npz

TILE_DIR = Path("pb/official_testdata/op_tuning_data.converted")
LAYOUT_FILE = Path("npz/layout/xla/default/valid/unet_3d.4x4.bf16.npz")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def tile_paths(shared_data: Path) -> list[Path]:
    return sorted((shared_data / TILE_DIR).glob("*.npz"))


@pytest.fixture(scope="session")
def tile_path(tile_paths: list[Path]) -> Path:
    """fusion.191: the kernel with the most configs (579)."""
    return next(p for p in tile_paths if p.name.startswith("fusion.191_"))


@pytest.fixture(scope="session")
def layout_path(shared_data: Path) -> Path:
    return shared_data / LAYOUT_FILE


@pytest.fixture(scope="session")
def tile_sample(tile_path: Path) -> Sample:
    return load_npz(tile_path)


@pytest.fixture(scope="session")
def layout_sample(layout_path: Path) -> Sample:
    return load_npz(layout_path)


@pytest.fixture
def fake() -> FakeService:
    return FakeService()


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def client(fake: FakeService, sleeps: Sleeps) -> Iterator[CostModelClient]:
    with CostModelClient(
        "http://costmodel.test",
        transport=httpx.MockTransport(fake),
        retry=RetryPolicy(max_attempts=4),
        sleep=sleeps,
    ) as c:
        yield c


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def live_server(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The real service under uvicorn (shipped models, real Redis), on a free port."""
    env = {
        "COSTMODEL_MODEL_DIR": str(REPO / "models" / "artifacts"),
        "COSTMODEL_MODELS": "tile,layout",
        "COSTMODEL_REDIS_URL": redis_server.url,
        "COSTMODEL_LOG_LEVEL": "WARNING",
        "COSTMODEL_DATA_DIR": str(tmp_path_factory.mktemp("data")),
    }
    with ServiceServer(tmp_path_factory.mktemp("uvicorn"), env) as server:
        yield server.url
