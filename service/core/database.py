"""The measurement store as the service uses it: opened lazily, reopened after a
failure, every blocking call in a worker thread.

    Database.run(fn)                fn(store) in a thread; StoreUnavailable if it cannot run
    Database.run(fn, writers=True)  the same on slots of the writers' own

Two limiters bound the threads: anonymous work (ranking's reads, retention, the
fleet's refresh) shares ``workers`` slots; feedback and token checks, which only a
writer's request makes, get ``writer_workers`` that anonymous work cannot take, so a
flood of anonymous requests queues behind itself, never in front of a writer.

``on_statement`` is called for every statement sent (the service counts them:
``costmodel_db_statements_total``; a rank of a known graph sends none).

The service must start and rank while the database is down (ranking then goes on
without adaptation, feedback answers 503), so opening is not a startup step that can
fail: the first call opens the store (and runs its migrations), and a call after a
failed open tries again once ``retry_s`` has passed, failing fast in between.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread

from xla_costmodel.service.store import MeasurementStore, StoreUnavailable
from xla_costmodel.service.store.engine import statements

log = logging.getLogger(__name__)
T = TypeVar("T")


class Database:
    def __init__(
        self,
        url: str | Callable[[], str],
        workers: int = 4,
        retry_s: float = 2.0,
        writer_workers: int = 2,
        on_statement: Callable[[], None] | None = None,
    ) -> None:
        # A callable is resolved at the first open: making the default SQLite
        # file's directory may fail, and that is an outage, not a crash at start.
        self._url = url
        self.retry_s = retry_s
        self._store: MeasurementStore | None = None
        self._failed_at = -float("inf")
        self._error = ""
        self._lock = threading.Lock()
        self._limiter = anyio.CapacityLimiter(workers)
        self._writers = anyio.CapacityLimiter(writer_workers)
        self._on_statement = on_statement  # every statement sent (a metric's inc)

    async def run(
        self, fn: Callable[[MeasurementStore], T], *, writers: bool = False
    ) -> T:
        """``fn(store)`` in a worker thread; ``writers``: on the writers' slots."""
        limiter = self._writers if writers else self._limiter
        return await anyio.to_thread.run_sync(self.call, fn, limiter=limiter)

    def call(self, fn: Callable[[MeasurementStore], T]) -> T:
        """``fn(store)`` in this thread (blocking)."""
        return fn(self._open())

    def _open(self) -> MeasurementStore:
        if self._store is not None:
            return self._store
        with self._lock:
            if self._store is not None:
                return self._store
            if time.monotonic() - self._failed_at < self.retry_s:
                raise StoreUnavailable(f"database unavailable: {self._error}")
            try:
                self._store = MeasurementStore.open(self.url)
            except (StoreUnavailable, OSError) as exc:
                self._failed_at, self._error = time.monotonic(), str(exc)
                log.warning("database unavailable", extra={"error": str(exc)})
                if isinstance(exc, OSError):
                    raise StoreUnavailable(f"database unavailable: {exc}") from exc
                raise
            if self._on_statement is not None:
                statements(self._store.engine).listen(self._on_statement)
            log.info("database open", extra={"dialect": self._store.dialect})
            return self._store

    @property
    def url(self) -> str:
        if callable(self._url):
            self._url = self._url()
        return self._url

    @property
    def scheme(self) -> str:
        return "sqlite" if callable(self._url) else self._url.split("://", 1)[0]

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
