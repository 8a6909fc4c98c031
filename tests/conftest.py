"""Fixtures shared by every test layer: the real TpuGraphs sample (in the repository,
``datasets/tpugraphs``), a real redis-server and a real PostgreSQL server
(``xla_costmodel.harness``), and the wheel built from this tree's sdist.

Redis and PostgreSQL are never mocked and never skipped: a missing ``redis-server`` or
``initdb``/``postgres`` fails the run (``make test`` installs both). Each session gets
its own servers on free ports, so tests never touch the Redis a developer may run on
6379 or the PostgreSQL on 5432.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from xla_costmodel.harness import PostgresServer, ProcessError, RedisServer

# ``COSTMODEL_TEST_SHUFFLE=SEED pytest ...`` runs the collected tests in an order
# shuffled with SEED (.ci/run does it once for the service tests): a test that passes
# only after another one, or only in file order, fails there.
SHUFFLE_ENV = "COSTMODEL_TEST_SHUFFLE"


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    seed = os.environ.get(SHUFFLE_ENV)
    if seed:
        random.Random(seed).shuffle(items)


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = os.environ.get(SHUFFLE_ENV)
    return f"test order shuffled with seed {seed!r} ({SHUFFLE_ENV})" if seed else None


REPO = Path(__file__).resolve().parents[1]
TPUGRAPHS = REPO / "datasets" / "tpugraphs"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The TpuGraphs sample the repository holds (no folder beside the checkout)."""
    if not TPUGRAPHS.is_dir():
        pytest.fail(f"real TpuGraphs data not found at {TPUGRAPHS}")
    return TPUGRAPHS


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The session's redis-server; tests may ``stop`` and ``start`` it (an outage)."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    try:
        server.start()
    except ProcessError as e:
        pytest.fail(f"{e} (run `make test`, which installs it)")
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """A clean database on the session's server (restarted if a test stopped it)."""
    if redis_server.proc is None:
        redis_server.start()
    redis_server.flushall()
    return redis_server.url


@pytest.fixture(scope="session")
def postgres_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[PostgresServer]:
    """The session's PostgreSQL; tests may ``shutdown`` and ``start`` it (an outage)."""
    try:
        server = PostgresServer(tmp_path_factory.mktemp("postgres"))
        server.start()
    except ProcessError as e:
        pytest.fail(f"{e} (run `make test`, which installs it)")
    try:
        yield server
    finally:
        server.stop()  # the cluster goes too


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database on the session's server (restarted if a test stopped
    it), dropped afterwards."""
    if postgres_server.proc is None:
        postgres_server.start()
    name = postgres_server.create_database()
    yield postgres_server.database_url(name)
    if postgres_server.proc is None:
        postgres_server.start()
    postgres_server.drop_database(name)


def _built(argv: list[str | Path], cwd: Path | None = None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the sdist built from this tree and the wheel built **from that
    sdist** (what ``pip install`` of an sdist does: the tree's folder links are files
    in the sdist), once per session (tests/test_packaging.py, the quick starts on a
    clean install)."""
    out = tmp_path_factory.mktemp("dist")
    build: list[str | Path] = [
        "build",
        "--no-isolation",
        "--sdist",
        "--outdir",
        out,
        REPO,
    ]
    _built([sys.executable, "-m", *build])
    sdist = next(out.glob("xla_costmodel-*.tar.gz"))
    # The wheel from the sdist alone: nothing of the checkout is reachable from here.
    wheel: list[str | Path] = [
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        out,
    ]
    _built(
        [sys.executable, "-m", "pip", *wheel, sdist],
        cwd=tmp_path_factory.mktemp("elsewhere"),
    )
    return out
