"""The stores' failures and traffic: the database, Redis, measurement generations.

``StoreMetrics`` is what the components with only failures to report take
(``FeedbackAuth``, ``FleetGain``, ``Retention``); the other collectors share it for
their own ``store_error``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from xla_costmodel.service.core.event_bus import ErrorOp
from xla_costmodel.service.core.generations import InvalidatedBy


class StoreMetrics:
    """``store_error`` of every core protocol; ``db_statement`` of
    ``xla_costmodel.service.store.engine.StatementCounter.listen``."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.store_errors = Counter(
            "costmodel_store_errors",
            "Measurement database failures by operation "
            "(feedback: 503; ranking: prior alone; archive: retried on a later sight).",
            ["op"],
            registry=r,
        )
        self.redis_integrity_failures = Counter(
            "costmodel_redis_integrity_failures",
            "Redis values and messages whose seal did not verify (each one a miss, "
            "or a message dropped): someone else than the service wrote them.",
            ["kind"],
            registry=r,
        )
        self.db_statements = Counter(
            "costmodel_db_statements",
            "Statements sent to the measurement database.",
            registry=r,
        )

    def store_error(self, op: str) -> None:
        self.store_errors.labels(op).inc()

    def redis_integrity_failure(self, kind: str) -> None:
        self.redis_integrity_failures.labels(kind).inc()

    def db_statement(self) -> None:
        self.db_statements.inc()


class GenerationMetrics:
    """``core.generations.GenerationEvents`` and ``core.event_bus.BusEvents``."""

    def __init__(self, r: CollectorRegistry, stores: StoreMetrics) -> None:
        self.stores = stores
        self.lookups = Counter(
            "costmodel_generation_lookups",
            "Measurement generations asked for by outcome "
            "(hit: cached and known fresh; read: a database query).",
            ["outcome"],
            registry=r,
        )
        self.invalidations = Counter(
            "costmodel_generation_invalidations",
            "Cached generations dropped: by this "
            "process's writes, another's (Redis), or all at a (re)subscription.",
            ["source"],
            registry=r,
        )
        self.subscribed = Gauge(
            "costmodel_generation_subscribed",
            "1 while the invalidation subscription "
            "is live (else COSTMODEL_FRESHNESS_S bounds staleness); lowest over workers.",
            registry=r,
            multiprocess_mode="livemin",
        )
        self.errors = Counter(
            "costmodel_generation_errors",
            "Redis failures of generation notification (each only shortens trust).",
            ["op"],
            registry=r,
        )

    def generation_lookup(self, hit: bool) -> None:
        self.lookups.labels("hit" if hit else "read").inc()

    def generation_invalidated(self, source: InvalidatedBy) -> None:
        self.invalidations.labels(source).inc()

    def generation_subscription(self, live: bool) -> None:
        self.subscribed.set(1 if live else 0)

    def generation_error(self, op: ErrorOp) -> None:
        self.errors.labels(op).inc()

    def redis_integrity_failure(self, kind: str) -> None:
        self.stores.redis_integrity_failure(kind)
