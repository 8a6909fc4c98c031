"""A throwaway ``redis-server`` on a free loopback port, spoken to over its wire
protocol (no client library needed)."""

from __future__ import annotations

import shutil
import socket

from xla_costmodel.harness.processes import LOOPBACK, ManagedProcess, ProcessError


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
