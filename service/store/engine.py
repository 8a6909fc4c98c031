"""Engines for the two supported databases, configured for durability and fast failure.

SQLite (the default, a file under the data directory): WAL journal, ``synchronous=FULL``
so a committed measurement survives a power cut, a busy timeout instead of instant
"database is locked", foreign keys on. SQLAlchemy emits ``BEGIN`` itself (the sqlite3
module's legacy mode would not begin before a SELECT), and write transactions use
``BEGIN IMMEDIATE``: they take the write lock first, so a read-then-write transaction
waits for the lock instead of failing when another writer committed in between.

PostgreSQL (``postgresql://`` becomes ``postgresql+psycopg://``): connections are
pinged before use (a restarted server costs one failed ping, not a failed request),
connecting gives up after 2 s, and statements after 30 s.

Every engine counts the statements it sends (``statements(engine)``: each cursor
execute, ``BEGIN`` included), so tests and the bench can check that a path issues
none, and the service can export the count.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Engine, create_engine, event, make_url
from sqlalchemy import exc as sa_exc

from xla_costmodel.service.store.errors import StoreError, StoreUnavailable

SQLITE_FILE = "costmodel.db"
SQLITE_BUSY_TIMEOUT_MS = 10_000
PG_CONNECT_TIMEOUT_S = 2
PG_STATEMENT_TIMEOUT_MS = 30_000
# Execution option that makes a SQLite transaction start with BEGIN IMMEDIATE.
WRITE = "costmodel_write"


def default_sqlite_url(data_dir: Path) -> str:
    """``sqlite:///<data_dir>/costmodel.db``, creating ``data_dir`` if needed."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreUnavailable(
            f"cannot create data directory {data_dir}: {exc}"
        ) from exc
    return f"sqlite:///{(data_dir / SQLITE_FILE).resolve()}"


def normalise_url(url: str) -> URL:
    """Parse ``url``; a plain ``postgresql://`` gets the psycopg (v3) driver."""
    try:
        parsed = make_url(url)
    except sa_exc.ArgumentError as exc:
        raise StoreError(f"invalid database URL: {exc}") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise StoreError(
            f"unsupported database {parsed.get_backend_name()!r}: "
            "use sqlite:///PATH or postgresql://…"
        )
    return parsed


def sqlite_path(url: URL) -> Path | None:
    """The file of a file-based SQLite URL (None for memory or URI-style names)."""
    database = url.database or ""
    if url.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return None
    if database.startswith("file:"):
        return None
    return Path(database)


def create_store_engine(url: str) -> Engine:
    """An engine for ``url`` (SQLite or PostgreSQL) with the settings above."""
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = _sqlite_engine(parsed)
    else:
        engine = _postgres_engine(parsed)
    counter = StatementCounter()
    event.listen(engine, "before_cursor_execute", counter.executed)
    _COUNTERS[engine] = counter
    return engine


class StatementCounter:
    """Statements one engine sent to its database; thread-safe."""

    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    @property
    def count(self) -> int:
        return self._count

    def listen(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` on every statement (in the executing thread; it must
        be cheap and thread-safe, e.g. a Prometheus counter's ``inc``)."""
        self._listeners.append(listener)

    def executed(self, *_args: Any) -> None:
        """The ``before_cursor_execute`` listener."""
        with self._lock:
            self._count += 1
        for listener in self._listeners:
            listener()


_COUNTERS: weakref.WeakKeyDictionary[Engine, StatementCounter] = (
    weakref.WeakKeyDictionary()
)


def statements(engine: Engine) -> StatementCounter:
    """The statement counter of an engine made by ``create_store_engine``."""
    return _COUNTERS[engine]


def _sqlite_engine(url: URL) -> Engine:
    path = sqlite_path(url)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(
                f"sqlite database unavailable: cannot create {path.parent}: {exc}"
            ) from exc
    engine = create_engine(
        url,
        connect_args={
            "check_same_thread": False,  # the pool hands a connection to one thread
            "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000,
        },
        pool_size=5,
        max_overflow=5,
        pool_timeout=10,
    )
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN (_sqlite_begin)
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        _set_wal(cursor)
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _set_wal(cursor: Any) -> None:
    """Switch to WAL (persistent in the file). On a fresh file opened by several
    connections at once the switch can fail with "database is locked" without the
    busy handler ever waiting, so it is retried here within the busy timeout."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL").fetchall()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _sqlite_begin(connection: Any) -> None:
    write = connection.get_execution_options().get(WRITE, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _postgres_engine(url: URL) -> Engine:
    connect_args: dict[str, Any] = {
        "connect_timeout": PG_CONNECT_TIMEOUT_S,
        "application_name": "costmodel",
    }
    if "options" not in url.query:
        connect_args["options"] = f"-c statement_timeout={PG_STATEMENT_TIMEOUT_MS}"
    return create_engine(
        url,
        connect_args=connect_args,
        pool_pre_ping=True,
        pool_size=5,
        max_overflow=5,
        pool_timeout=10,
    )
