"""The measurement database: graphs and the runtimes autotuners measured on them.

SQLite file by default, PostgreSQL for several replicas; see ``store.py`` for the API,
``engine.py`` for durability settings, ``migrate.py`` for schema upgrades.
"""

from xla_costmodel.service.store.engine import default_sqlite_url
from xla_costmodel.service.store.errors import (
    IdempotencyConflict,
    StoreError,
    StoreUnavailable,
    UnknownGraph,
)
from xla_costmodel.service.store.records import (
    AddResult,
    Measured,
    MeasurementBatch,
    StoredGraph,
)
from xla_costmodel.service.store.store import MeasurementStore

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
