"""The measurement database: graphs and the runtimes autotuners measured on them.

SQLite file by default, PostgreSQL for several replicas; see ``store.py`` for the API,
``engine.py`` for durability settings, ``migrate.py`` for schema upgrades.
"""

from service.store.engine import default_sqlite_url
from service.store.errors import (
    IdempotencyConflict,
    StoreError,
    StoreUnavailable,
    UnknownGraph,
)
from service.store.records import AddResult, Measured, MeasurementBatch, StoredGraph
from service.store.store import MeasurementStore

__all__ = [
    "AddResult",
    "IdempotencyConflict",
    "Measured",
    "MeasurementBatch",
    "MeasurementStore",
    "StoreError",
    "StoreUnavailable",
    "StoredGraph",
    "UnknownGraph",
    "default_sqlite_url",
]
