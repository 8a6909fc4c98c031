"""Fixtures shared by every test layer: the real data folder, a real redis-server and
a real PostgreSQL server.

Redis and PostgreSQL are never mocked and never skipped: a missing ``redis-server`` or
``initdb``/``postgres`` fails the run (``make test`` installs both). Each session gets
its own servers on free ports, so tests never touch the Redis a developer may run on
6379 or the PostgreSQL on 5432.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "tpugraphs"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"real TpuGraphs data not found at {SHARED}")
    return SHARED


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisProcess:
    """A throwaway redis-server; ``stop``/``start`` let tests simulate an outage."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail(
                "redis-server is not installed (run `make test`, which installs it)"
            )
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.2
                ) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        pytest.fail(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def flushall(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(16)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisProcess) -> str:
    """A clean database on the session's server (restarted if a test stopped it)."""
    if redis_server.proc is None:
        redis_server.start()
    redis_server.flushall()
    return redis_server.url


def postgres_bindir() -> Path | None:
    """The newest PostgreSQL server binaries: Debian keeps them off PATH, under
    /usr/lib/postgresql/<major>/bin."""
    candidates = sorted(
        (Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            candidates.append(Path(out.stdout.strip()))
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidates.append(Path(initdb).resolve().parent)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "postgres").is_file():
            return bindir
    return None


class PostgresProcess:
    """A throwaway PostgreSQL cluster (trust auth, fsync off) on a free port.

    PostgreSQL refuses to run as root, so as root the cluster belongs to the
    ``postgres`` system user and lives in its own directory under /tmp (pytest's
    temporary directories are private to root). ``stop``/``start`` simulate an outage;
    the port stays the same.
    """

    def __init__(self) -> None:
        bindir = postgres_bindir()
        if bindir is None:
            pytest.fail(
                "PostgreSQL server binaries (initdb, postgres) not found under "
                "/usr/lib/postgresql/*/bin (run `make test`, which installs them)"
            )
        self.bindir = bindir
        self.as_user: dict[str, Any] = {}
        if os.geteuid() == 0:
            import pwd

            try:
                entry = pwd.getpwnam("postgres")
            except KeyError:
                pytest.fail("running as root, but there is no `postgres` user")
            self.as_user = {
                "user": entry.pw_uid,
                "group": entry.pw_gid,
                "extra_groups": [],
            }
        self.root = Path(tempfile.mkdtemp(prefix="costmodel-pg-"))
        self.datadir = self.root / "data"
        self.sockdir = self.root / "sock"
        self.sockdir.mkdir()
        if self.as_user:
            for path in (self.root, self.sockdir):
                os.chown(path, self.as_user["user"], self.as_user["group"])
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root / "postgres.log"
        result = subprocess.run(
            [
                str(bindir / "initdb"),
                "-D",
                str(self.datadir),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
            **self.as_user,
        )
        if result.returncode != 0:
            pytest.fail(f"initdb failed: {result.stderr or result.stdout}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(self.bindir / "postgres"),
                    "-D",
                    str(self.datadir),
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.sockdir),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "max_connections=200",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                **self.as_user,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                self.execute("SELECT 1")
                return
            except Exception:
                time.sleep(0.05)
        tail = self.log.read_text(errors="replace")[-2000:]
        self.stop()
        pytest.fail(f"postgres did not start on port {self.port}:\n{tail}")

    def stop(self) -> None:
        """Fast shutdown: clients are disconnected, as in a real outage."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self.proc = None

    def execute(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True, connect_timeout=2) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def create_database(self) -> str:
        name = f"test_{uuid.uuid4().hex[:16]}"
        self.execute(f"CREATE DATABASE {name}")
        return name

    def drop_database(self, name: str) -> None:
        self.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresProcess]:
    server = PostgresProcess()
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def postgres_url(postgres_server: PostgresProcess) -> Iterator[str]:
    """A fresh, empty database on the session's server (restarted if a test stopped
    it), dropped afterwards."""
    if postgres_server.proc is None:
        postgres_server.start()
    name = postgres_server.create_database()
    yield postgres_server.url(name)
    if postgres_server.proc is None:
        postgres_server.start()
    postgres_server.drop_database(name)
