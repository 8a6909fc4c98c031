"""A throwaway PostgreSQL cluster: ``initdb`` into a fresh directory, ``postgres`` on
a free loopback port. psycopg is imported by the probe when it runs, so this module
stays importable without it."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any, Self

from xla_costmodel.harness.processes import LOOPBACK, ManagedProcess, ProcessError


def postgres_bindir() -> Path | None:
    """The newest PostgreSQL server binaries: Debian keeps them off PATH, under
    /usr/lib/postgresql/<major>/bin; else where ``pg_config`` says, else next to an
    ``initdb`` on PATH."""

    def major(path: Path) -> int:
        return int(path.parent.name) if path.parent.name.isdigit() else 0

    candidates = sorted(
        map(Path, glob.glob("/usr/lib/postgresql/*/bin")), key=major, reverse=True
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


class PostgresServer(ManagedProcess):
    """A throwaway PostgreSQL cluster: ``initdb`` (trust auth, no fsync) into a fresh
    directory under /tmp, then ``postgres`` on a free loopback port.

    PostgreSQL refuses to run as root, so as root the cluster belongs to the
    ``postgres`` system user (hence /tmp: pytest's temporary directories are private
    to root). Never the PostgreSQL a machine may run on 5432. ``shutdown`` is a fast
    shutdown (clients are disconnected, as in an outage) that keeps the cluster for
    ``start``; ``stop`` shuts down and removes the cluster.
    """

    name = "postgres"
    ready_timeout_s = 30.0

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        bindir = postgres_bindir()
        if bindir is None:
            raise ProcessError(
                "PostgreSQL server binaries (initdb, postgres) not found "
                "(`make postgresql`)"
            )
        self.bindir = bindir
        self.as_user = _postgres_user()
        self.root: Path | None = None

    @property
    def url(self) -> str:
        return self.database_url("postgres")

    def database_url(self, database: str) -> str:
        return f"postgresql://postgres@{LOOPBACK}:{self.port}/{database}"

    def start(self) -> Self:
        if self.root is not None:  # a restart: the cluster is still there
            return super().start()
        self._initdb()
        try:
            return super().start()
        except BaseException:
            self._remove()
            raise

    def _initdb(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="costmodel-pg-"))
        (self.root / "sock").mkdir()
        if self.as_user:
            for path in (self.root, self.root / "sock"):
                os.chown(path, self.as_user["user"], self.as_user["group"])
        done = subprocess.run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.root / "data"),
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
            cwd=self.root,
            **self.as_user,
        )
        if done.returncode != 0:
            self._remove()
            raise ProcessError(f"initdb failed: {done.stderr or done.stdout}")

    def command(self) -> list[str]:
        assert self.root is not None, "start() runs initdb first"
        return [
            str(self.bindir / "postgres"),
            "-D",
            str(self.root / "data"),
            "-p",
            str(self.port),
            "-k",
            str(self.root / "sock"),
            "-c",
            f"listen_addresses={LOOPBACK}",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=200",
        ]

    def popen_options(self) -> dict[str, Any]:
        return {"cwd": self.root, **self.as_user}

    def ready(self) -> bool:
        import psycopg

        try:
            self.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def execute(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True, connect_timeout=2) as conn:
            conn.execute(sql)

    def create_database(self) -> str:
        """A new, empty database; its name."""
        name = f"test_{uuid.uuid4().hex[:16]}"
        self.execute(f"CREATE DATABASE {name}")
        return name

    def drop_database(self, name: str) -> None:
        self.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def shutdown(self) -> None:
        """Fast shutdown (SIGINT; SIGTERM would wait for clients), keeping the cluster."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def stop(self) -> None:
        self.shutdown()
        self._remove()

    def _remove(self) -> None:
        root, self.root = self.root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)


def _postgres_user() -> dict[str, Any]:
    """Popen/run keyword arguments that drop root to the ``postgres`` user."""
    if os.geteuid() != 0:
        return {}
    import pwd

    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        raise ProcessError("running as root, but there is no `postgres` user") from None
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
