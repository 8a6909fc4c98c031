"""The processes a run starts: a throwaway ``redis-server``, PostgreSQL cluster and
uvicorn server.

All bind 127.0.0.1 on a free port, log to a file in the run's work directory, are
waited on until they answer, and are stopped (terminate, then kill) by ``stop``, which
is safe to call twice. Use them as context managers so a failing phase still stops them.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

LOOPBACK = "127.0.0.1"


class ProcessError(RuntimeError):
    """A process the harness needs could not be started or did not become ready."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    """Resident set size of a live process, from ``/proc/<pid>/status`` (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise ProcessError(f"no VmRSS for pid {pid}")


def wait_until(
    check: Callable[[], bool], timeout_s: float, interval_s: float = 0.05
) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval_s)
    return False


class ManagedProcess:
    """A child process with a log file; subclasses say how to start and probe it."""

    name = "process"
    ready_timeout_s = 30.0

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.log_path = workdir / f"{self.name}-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> Mapping[str, str] | None:
        return None

    def ready(self) -> bool:
        raise NotImplementedError

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise ProcessError(f"{self.name} is not running")
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> Self:
        """Spawn and wait until ready. A process that exits at once is retried on a
        new port (another process may take a free port before we bind it)."""
        for attempt in range(3):
            if attempt:
                self.port = free_port()
                self.log_path = self.workdir / f"{self.name}-{self.port}.log"
            self._spawn()
            if not wait_until(
                lambda: not self.running or self.ready(), self.ready_timeout_s
            ):
                self.stop()
                raise ProcessError(
                    f"{self.name} not ready in {self.ready_timeout_s:.0f} s\n"
                    + self.log_tail()
                )
            if self.running:
                return self
        self.stop()
        raise ProcessError(f"{self.name} exited at startup\n{self.log_tail()}")

    def _spawn(self) -> None:
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env(),
                cwd=self.workdir,
            )

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(
                self.log_path.read_text(errors="replace").splitlines()[-lines:]
            )
        except OSError:
            return ""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class RedisServer(ManagedProcess):
    """``redis-server`` with no persistence, on a free loopback port."""

    name = "redis"
    ready_timeout_s = 10.0

    def command(self) -> list[str]:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ProcessError("redis-server is not installed (`make redis-server`)")
        return [
            binary,
            "--port",
            str(self.port),
            "--bind",
            LOOPBACK,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
        ]

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    def _send(self, command: bytes) -> bytes:
        with socket.create_connection((LOOPBACK, self.port), timeout=2) as s:
            s.sendall(command)
            return s.recv(64)

    def ready(self) -> bool:
        try:
            return self._send(b"PING\r\n").startswith(b"+PONG")
        except OSError:
            return False

    def flushall(self) -> None:
        if not self._send(b"FLUSHALL\r\n").startswith(b"+OK"):
            raise ProcessError("redis FLUSHALL failed")

    def dbsize(self) -> int:
        return int(self._send(b"DBSIZE\r\n").strip().lstrip(b":"))


class ServiceServer(ManagedProcess):
    """The service under uvicorn, one worker, configured by ``COSTMODEL_*`` variables.

    It is started through the service's own factory ``xla_costmodel.service.app:app_from_env``
    (``create_app(Settings())``), so it is the app ``costmodel serve`` runs.
    """

    name = "uvicorn"
    ready_timeout_s = 90.0

    def __init__(
        self, workdir: Path, settings_env: Mapping[str, str], workers: int = 1
    ) -> None:
        super().__init__(workdir)
        self.settings_env = dict(settings_env)
        self.workers = workers  # uvicorn processes (the peers phase tries 1 and 2)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "xla_costmodel.service.app:app_from_env",
            "--host",
            LOOPBACK,
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
            "--log-level",
            "warning",
            "--no-access-log",
        ]

    def env(self) -> Mapping[str, str]:
        repo = str(Path(__file__).resolve().parents[1])
        path = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)
        # The caller's own COSTMODEL_* variables (a Redis on 6379, say) stay out: the
        # server gets exactly the settings of this run.
        inherited = {
            k: v for k, v in os.environ.items() if not k.startswith("COSTMODEL_")
        }
        return {**inherited, "PYTHONPATH": path, **self.settings_env}

    def ready(self) -> bool:
        """``GET /readyz`` answers 200 once every model is loaded and warmed up."""
        try:
            return httpx.get(self.url + "/readyz", timeout=1.0).is_success
        except httpx.HTTPError:
            return False


def postgres_bindir() -> Path | None:
    """The newest PostgreSQL server binaries (Debian keeps them off PATH, under
    /usr/lib/postgresql/<major>/bin), else the ones next to ``initdb`` on PATH."""

    def major(path: Path) -> int:
        return int(path.parent.name) if path.parent.name.isdigit() else 0

    candidates = sorted(map(Path, glob.glob("/usr/lib/postgresql/*/bin")), key=major)
    on_path = shutil.which("initdb")
    if on_path is not None:
        candidates.insert(0, Path(on_path).resolve().parent)
    for bindir in reversed(candidates):
        if (bindir / "initdb").is_file() and (bindir / "postgres").is_file():
            return bindir
    return None


class PostgresServer(ManagedProcess):
    """A throwaway PostgreSQL cluster: ``initdb`` (trust auth, no fsync) into a fresh
    directory under /tmp, then ``postgres`` on a free loopback port.

    PostgreSQL refuses to run as root, so as root the cluster belongs to the
    ``postgres`` system user. Never the PostgreSQL a machine may run on 5432.
    ``stop`` is a fast shutdown (clients are disconnected) and removes the cluster.
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
        return f"postgresql://postgres@{LOOPBACK}:{self.port}/postgres"

    def start(self) -> Self:
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

    def _spawn(self) -> None:
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
                **self.as_user,
            )

    def ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # fast shutdown; SIGTERM waits for clients
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
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
