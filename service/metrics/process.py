"""Figures of the process itself: readiness, memory, the in-process cache's size.

One process: gauges read their source when rendered (``set_function``). Several
workers: ``set_function`` is not seen by the other workers, so each worker samples
its own values into its file (``sample``: on cache lookups and when rendering).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Gauge

from xla_costmodel.service.process_memory import memory_limit_bytes, resident_bytes

# Workers sample their RSS on cache events at most this often (a /proc read).
RSS_SAMPLE_S = 1.0


class ProcessMetrics:
    def __init__(self, r: CollectorRegistry, multiprocess: bool) -> None:
        self.multiprocess = multiprocess
        # Workers: the sum over live ones, each as of its latest cache lookup.
        self.memory_bytes = Gauge(
            "costmodel_cache_memory_bytes",
            "Bytes held by the in-process cache.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.memory_entries = Gauge(
            "costmodel_cache_memory_entries",
            "Entries in the in-process cache.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.ready = Gauge(
            "costmodel_ready",
            "1 when every configured model is loaded and warm "
            "(what /readyz answers); the lowest over live workers.",
            registry=r,
            multiprocess_mode="livemin",
        )
        self.resident_bytes = Gauge(
            "costmodel_process_resident_memory_bytes",
            "Resident memory of the service's processes (the sum over live workers).",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.memory_limit = Gauge(
            "costmodel_memory_limit_bytes",
            "Memory the processes may use: the "
            "cgroup's limit (a pod's limits.memory), else the machine's RAM.",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.memory_limit.set(memory_limit_bytes())
        self._memory: tuple[Callable[[], float], Callable[[], float]] | None = None
        self._ready: Callable[[], bool] | None = None
        self._rss_sampled = -RSS_SAMPLE_S
        if not multiprocess:
            self.resident_bytes.set_function(resident_bytes)
        else:
            self.sample(force=True)

    def watch_memory(
        self, nbytes: Callable[[], float], entries: Callable[[], float]
    ) -> None:
        if self.multiprocess:
            self._memory = (nbytes, entries)
            return
        self.memory_bytes.set_function(nbytes)
        self.memory_entries.set_function(entries)

    def watch_ready(self, ready: Callable[[], bool]) -> None:
        if not self.multiprocess:
            self.ready.set_function(lambda: 1.0 if ready() else 0.0)
            return
        self._ready = ready  # sampled now, on cache events and when rendering
        self.ready.set(1 if ready() else 0)

    def sample(self, force: bool = False) -> None:
        """Copy the watched values into this worker's gauges (see the module)."""
        if self._memory is not None:
            self.memory_bytes.set(self._memory[0]())
            self.memory_entries.set(self._memory[1]())
        if self._ready is not None:
            self.ready.set(1 if self._ready() else 0)
        now = time.monotonic()
        # Multiprocess: another worker renders, so each one samples its own RSS.
        if self.multiprocess and (force or now - self._rss_sampled >= RSS_SAMPLE_S):
            self._rss_sampled = now
            self.resident_bytes.set(resident_bytes())
