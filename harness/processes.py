"""A child process with a log file, waited on until it answers, stopped for sure.

``ManagedProcess`` is what every server of the harness is: it logs to a file in its
work directory, ``start`` waits until ``ready``, ``stop`` terminates then kills (safe
to call twice), and ``start`` after ``stop`` or ``kill`` brings it back on the same
port, as after an outage, so clients keep their URLs. Use it as a context manager so
a failing phase still stops it. A process that cannot be started raises
``ProcessError``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

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
