"""The processes the bench, the chaos run, the studies and the tests start: a throwaway
``redis-server``, PostgreSQL cluster and costmodel service, each on a free loopback
port, and the artifact copies those services are given.

    processes.py   ManagedProcess (start, probe, stop, restart on the same port),
                   free_port, wait_until, rss_mb, child_processes, ProcessError
    redis.py       RedisServer
    postgres.py    PostgresServer, postgres_bindir
    service.py     ServiceServer, SERVE_MODULE
    artifacts.py   copy_artifact, set_version, add_version (whole or corrupted)

Only the standard library is imported at import time: this package stays importable
on the base install (psycopg is imported by the PostgreSQL probe when it runs). A
server that cannot be started raises ``ProcessError`` (the test fixtures turn it into
a failure, never a skip).
"""

from __future__ import annotations

from xla_costmodel.harness.artifacts import add_version, copy_artifact, set_version
from xla_costmodel.harness.postgres import PostgresServer, postgres_bindir
from xla_costmodel.harness.processes import (
    LOOPBACK,
    ManagedProcess,
    ProcessError,
    child_processes,
    free_port,
    rss_mb,
    wait_until,
)
from xla_costmodel.harness.redis import RedisServer
from xla_costmodel.harness.service import SERVE_MODULE, ServiceServer

__all__ = [
    "LOOPBACK",
    "SERVE_MODULE",
    "ManagedProcess",
    "PostgresServer",
    "ProcessError",
    "RedisServer",
    "ServiceServer",
    "add_version",
    "child_processes",
    "copy_artifact",
    "free_port",
    "postgres_bindir",
    "rss_mb",
    "set_version",
    "wait_until",
]
