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
    Quota,
    StoredGraph,
)
from xla_costmodel.service.store.store import MeasurementStore
from xla_costmodel.service.store.writers import (
    QuotaExceeded,
    UnknownWriter,
    Writer,
    WriterExists,
)

__all__ = [
    "AddResult",
    "IdempotencyConflict",
    "Measured",
    "MeasurementBatch",
    "MeasurementStore",
    "Quota",
    "QuotaExceeded",
    "StoreError",
    "StoreUnavailable",
    "StoredGraph",
    "UnknownGraph",
    "UnknownWriter",
    "Writer",
    "WriterExists",
    "default_sqlite_url",
]
