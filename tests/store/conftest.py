"""Every store test runs twice: on a real SQLite file and on the real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from xla_costmodel.service.store import MeasurementStore, default_sqlite_url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return default_sqlite_url(tmp_path / "data")
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[MeasurementStore]:
    opened = MeasurementStore.open(store_url)
    yield opened
    opened.close()
