"""The caches' figures: ``xla_costmodel.service.core.tiered.CacheEvents`` (and the
graph archive's, which adds ``store_error``)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter

from xla_costmodel.service.core.tiered import Level
from xla_costmodel.service.metrics.stores import StoreMetrics


class CacheMetrics:
    def __init__(
        self,
        r: CollectorRegistry,
        stores: StoreMetrics,
        on_lookup: Callable[[], None],
    ) -> None:
        """``on_lookup``: called on every counted hit or miss (workers sample their
        process gauges then, ``ProcessMetrics.sample``)."""
        self.stores = stores
        self.on_lookup = on_lookup
        self.hits = Counter(
            "costmodel_cache_hits", "Embedding cache hits.", ["level"], registry=r
        )
        self.misses = Counter(
            "costmodel_cache_misses", "Embedding cache misses.", ["level"], registry=r
        )
        self.errors = Counter(
            "costmodel_cache_errors",
            "Embedding cache failures (each one a miss).",
            ["level", "op"],
            registry=r,
        )
        self.bypassed = Counter(
            "costmodel_cache_bypassed",
            "Lookups that skipped Redis during its cooldown.",
            ["level"],
            registry=r,
        )

    def cache_hit(self, level: Level) -> None:
        self.hits.labels(level).inc()
        self.on_lookup()

    def cache_miss(self, level: Level) -> None:
        self.misses.labels(level).inc()
        self.on_lookup()

    def cache_error(self, level: Level, op: str) -> None:
        self.errors.labels(level, op).inc()

    def cache_bypass(self, level: Level) -> None:
        self.bypassed.labels(level).inc()

    def redis_integrity_failure(self, kind: str) -> None:
        self.stores.redis_integrity_failure(kind)

    def store_error(self, op: str) -> None:
        self.stores.store_error(op)
