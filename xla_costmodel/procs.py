"""The processes that the tests, the bench, the chaos run and the studies start: a
throwaway ``redis-server``, PostgreSQL cluster and costmodel service, each on a free
loopback port; and the artifact copies those services are given.

Every process logs to a file in its work directory, is waited on until it answers, and
is stopped (terminate, then kill) by ``stop``, which is safe to call twice. ``start``
after ``stop`` brings it back on the same port, as after an outage, so clients keep
their URLs. Use them as context managers so a failing phase still stops them. A server
that cannot be started raises ``ProcessError`` (the test fixtures turn it into a
failure, never a skip).

Only the standard library is imported at import time: the tests and the ``[bench]``
extra use this module, and it stays importable on the base install (psycopg is
imported by the PostgreSQL probe when it runs).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

LOOPBACK = "127.0.0.1"


class ProcessError(RuntimeError):
    """A process could not be started or did not become ready."""


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


def child_processes() -> set[str]:
    """Live (not zombie) children of this process as ``"pid: command line"`` (Linux),
    so a run can check it left none behind. multiprocessing's resource tracker is
    left out: started once, on first use of a spawn context, it lives as long as its
    parent by design."""
    me = os.getpid()
    found = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # it ended while we looked
            continue
        if (
            int(fields[1]) == me
            and fields[0] != "Z"
            and "resource_tracker" not in cmdline
        ):
            found.add(f"{proc.name}: {cmdline}")
    return found


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
        self.started = False  # once up, restarts keep the port

    def command(self) -> list[str]:
        raise NotImplementedError

    def popen_options(self) -> dict[str, Any]:
        """Extra ``subprocess.Popen`` arguments (environment, working directory)."""
        return {"cwd": self.workdir}

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
        """Spawn and wait until ready. A first start that exits at once is retried on
        a new port (another process may take a free port before we bind it); a
        restart keeps its port or fails."""
        for attempt in range(1 if self.started else 3):
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
                self.started = True
                return self
        self.stop()
        raise ProcessError(f"{self.name} exited at startup\n{self.log_tail()}")

    def _spawn(self) -> None:
        # Appended: a restart's log follows the crash it recovers from.
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                **self.popen_options(),
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

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown. ``start`` brings it back."""
        proc, self.proc = self.proc, None
        if proc is not None:
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


# The module the service's own ``costmodel serve`` runs, for ``ServiceServer(argv=)``.
SERVE_MODULE = "xla_costmodel.service.cli"


class ServiceServer(ManagedProcess):
    """The costmodel service, configured by ``COSTMODEL_*`` variables.

    ``settings_env`` is set on top of this process's environment, whose own
    ``COSTMODEL_*`` variables (a Redis on 6379, say) stay out: the server gets exactly
    the settings it is given. Without ``argv`` it is uvicorn on the service's factory
    ``xla_costmodel.service.app:app_from_env`` (``create_app(Settings())``, the app
    ``costmodel serve`` runs) with ``workers`` processes and no access log; with
    ``argv`` (``[sys.executable, "-m", SERVE_MODULE]``, the ``costmodel`` script and
    ``serve``, ...) it is that command with ``--host`` and ``--port`` appended.
    """

    name = "service"
    ready_timeout_s = 90.0

    def __init__(
        self,
        workdir: Path,
        settings_env: Mapping[str, str],
        workers: int = 1,
        argv: Sequence[str] | None = None,
    ) -> None:
        super().__init__(workdir)
        self.settings_env = dict(settings_env)
        self.workers = workers
        self.argv = list(argv) if argv is not None else None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        address = ["--host", LOOPBACK, "--port", str(self.port)]
        if self.argv is not None:
            return [*self.argv, *address]
        return [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "xla_costmodel.service.app:app_from_env",
            *address,
            "--workers",
            str(self.workers),
            "--log-level",
            "warning",
            "--no-access-log",
        ]

    def popen_options(self) -> dict[str, Any]:
        inherited = {
            k: v for k, v in os.environ.items() if not k.startswith("COSTMODEL_")
        }
        return {"cwd": self.workdir, "env": {**inherited, **self.settings_env}}

    def ready(self) -> bool:
        """``GET /readyz`` answers 200 once every model is loaded and warmed up."""
        # No proxy: an http_proxy variable must not route loopback probes away.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(self.url + "/readyz", timeout=1.0) as response:
                return bool(response.status == 200)
        except OSError:  # refused, reset, timed out, or an HTTP error status
            return False


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


def set_version(artifact: Path, version: str) -> None:
    """Rewrite an artifact's manifest version (the registry refuses a directory
    whose manifest names another version)."""
    path = artifact / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["version"] = version
    path.write_text(json.dumps(manifest, indent=2))


def copy_artifact(source: Path, target: Path) -> Path:
    """Copy an artifact directory; its manifest's version becomes the target's name."""
    shutil.copytree(source, target)
    set_version(target, target.name)
    return target


def add_version(
    model_dir: Path,
    name: str,
    version: str,
    *,
    source: str = "1",
    corrupt: Literal["truncate", "sha256"] | None = None,
) -> Path:
    """Copy ``model_dir/name/source`` as ``version``. ``corrupt``: "truncate" cuts
    the encoder in half, as a half-written upload would; "sha256" leaves the files
    whole and breaks the scorer's checksum in the manifest."""
    target = copy_artifact(model_dir / name / source, model_dir / name / version)
    path = target / "manifest.json"
    manifest = json.loads(path.read_text())
    if corrupt == "truncate":
        encoder = target / manifest["encoder"]["file"]
        encoder.write_bytes(encoder.read_bytes()[: encoder.stat().st_size // 2])
    elif corrupt == "sha256":
        manifest["scorer"]["sha256"] = "0" * 64
        path.write_text(json.dumps(manifest, indent=2))
    return target
