"""What goes into the store and what comes out of it (plain frozen dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np

# Where a stored measurement came from: a feedback request, or an import.
RowOrigin = Literal["feedback", "import"]
# Column widths of the tables (schema.py); longer values are refused up front.
MAX_LENGTHS = {
    "model": 128,
    "model_version": 64,
    "collection": 64,
    "target": 128,
    "graph_id": 64,
    "request_id": 128,
    "idempotency_key": 200,
    "request_hash": 64,
    "writer": 64,
    "compiler": 128,
}


@dataclass(frozen=True)
class Quota:
    """At most ``rows`` measurements per writer in any ``window_s`` seconds, and
    ``graph_bytes`` of the graphs it archives with them (0: no cap)."""

    rows: int
    window_s: int
    graph_bytes: int = 0


@dataclass(frozen=True)
class GraphRow:
    """A graph to archive with the measurements that need it (``arrays``: encoded)."""

    graph_id: str
    collection: str
    arrays: bytes
    num_nodes: int
    first_seen: datetime


@dataclass(frozen=True, kw_only=True)
class MeasurementBatch:
    """Measured runtimes of ``C`` configs of one graph, stored in one transaction.

    ``configs`` is [C, ...] of any numeric dtype, stored row by row with that dtype
    and row shape. With an ``idempotency_key``, a resend with the same
    ``request_hash`` stores nothing and gets ``response`` back.
    """

    model: str
    model_version: str
    collection: str
    target: str
    graph_id: str
    configs: np.ndarray[Any, Any]
    runtimes_ns: np.ndarray[Any, Any]  # int64 [C], all > 0
    scores: np.ndarray[Any, Any] | None  # float32 [C] (NaN = none) or None
    request_id: str | None
    source: RowOrigin
    idempotency_key: str | None = None
    request_hash: str | None = None
    response: dict[str, Any] | None = None
    writer: str | None = None  # who stored it (None: feedback auth off, or import)
    quota: Quota | None = None  # the writer's, checked in the storing transaction
    # The graph, archived in the same transaction if the database lacks it.
    graph: GraphRow | None = None
    compiler: str | None = None  # the compiler measured under (None: unknown)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first thing wrong with the batch."""
        for name, limit in MAX_LENGTHS.items():
            value = getattr(self, name)
            if value is not None and not (0 < len(value) <= limit):
                raise ValueError(f"{name}: expected 1 to {limit} characters")
        if self.source not in ("feedback", "import"):
            raise ValueError(
                f"source: expected feedback or import, got {self.source!r}"
            )
        configs, runtimes = np.asarray(self.configs), np.asarray(self.runtimes_ns)
        count = configs.shape[0] if configs.ndim else 0
        if count == 0:
            raise ValueError("configs: expected a non-empty [C, ...] array")
        if runtimes.shape != (count,) or runtimes.dtype.kind not in "iu":
            raise ValueError(f"runtimes_ns: expected {count} integers")
        if runtimes.min() <= 0:
            raise ValueError("runtimes_ns: runtimes must be > 0")
        if self.scores is not None and np.shape(self.scores) != (count,):
            raise ValueError(f"scores: expected {count} values")


@dataclass(frozen=True)
class AddResult:
    stored: int  # rows inserted now (0 for a duplicate)
    duplicate: bool  # the key was seen before with the same hash; nothing stored
    response: dict[str, Any] | None  # the stored response, for a duplicate


@dataclass(frozen=True)
class StoredRows:
    """Measurements of one (collection, target, graph), in id (insertion) order.

    With no rows, ``configs`` has shape (0,).
    """

    configs: np.ndarray[Any, Any]  # float32 [N, ...]
    runtimes_ns: np.ndarray[Any, Any]  # int64 [N]
    scores: np.ndarray[Any, Any]  # float32 [N], NaN where none
    ids: np.ndarray[Any, Any]  # int64 [N]
    writers: tuple[str | None, ...] = ()  # per row, when asked for
    compilers: tuple[str | None, ...] = ()  # per row (None: unknown), when asked for

    def __len__(self) -> int:
        return int(self.ids.shape[0])


@dataclass(frozen=True)
class StoredGraph:
    graph_id: str
    collection: str
    arrays: dict[str, np.ndarray[Any, Any]]
    first_seen: datetime
