"""The measurement database: graphs and the runtimes autotuners measured on them.

SQLite file by default, PostgreSQL for several replicas; see ``store.py`` for the API,
``engine.py`` for durability settings, ``migrate.py`` for schema upgrades.
"""

from xla_costmodel.service.store.decisions import (
    DecisionAdded,
    DecisionRecord,
    StoredDecision,
)
from xla_costmodel.service.store.engine import default_sqlite_url
from xla_costmodel.service.store.errors import (
    IdempotencyKeyReused,
    StoreError,
    StoreUnavailable,
    UnknownGraph,
)
from xla_costmodel.service.store.records import (
    AddResult,
    MeasurementBatch,
    Quota,
    StoredGraph,
    StoredRows,
)
from xla_costmodel.service.store.store import MeasurementStore
from xla_costmodel.service.store.writers import (
    UnknownWriter,
    Writer,
    WriterExists,
    WriterQuotaExceeded,
)

__all__ = [
    "AddResult",
    "DecisionAdded",
    "DecisionRecord",
    "IdempotencyKeyReused",
    "MeasurementBatch",
    "MeasurementStore",
    "Quota",
    "StoreError",
    "StoreUnavailable",
    "StoredDecision",
    "StoredGraph",
    "StoredRows",
    "UnknownGraph",
    "UnknownWriter",
    "Writer",
    "WriterExists",
    "WriterQuotaExceeded",
    "default_sqlite_url",
]
