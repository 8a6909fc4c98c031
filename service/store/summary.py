"""Per graph: how many runtimes were measured, the fastest, and the default's.

    graph_summaries(conn) -> [GraphSummary]   one aggregate query over all measurements

This is what the fleet's tuning gain is computed from (``service/core/fleet.py``):
for each (model, collection, target, graph), the number of measurements, the fastest
runtime measured of any config, and the fastest runtime measured of the collection's
default config (``CollectionSpec.default_config``; None where the collection has no
fixed default row, or where the default was never measured).

Both are minima: the estimator ``costmodel collect`` and ``costmodel tune`` measure
with (the minimum of repeated runs), and one that SQL computes on both databases in
one pass without reading configs back into Python. The default is recognised by its
stored bytes: a config is stored in the smallest dtype its batch fits
(``core/feedback.compact``), so the default row's bytes are compared in every dtype it
may have been stored in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import Connection, and_, case, false, func, or_, select
from sqlalchemy.sql.elements import ColumnElement

from xla_costmodel.service.store.schema import measurements
from xla_costmodel.tpugraphs.collections import COLLECTIONS

# Every dtype a stored config row may have (``codec.config_dtype``), little-endian.
STORED_DTYPES = (
    "|i1",
    "|u1",
    "<i2",
    "<u2",
    "<i4",
    "<u4",
    "<i8",
    "<u8",
    "<f2",
    "<f4",
    "<f8",
)


@dataclass(frozen=True)
class GraphSummary:
    model: str
    collection: str
    target: str
    graph_id: str
    measurements: int
    best_ns: int  # the fastest runtime measured of any config
    default_ns: int | None  # the fastest of the default config; None: not measured


def default_encodings(row: tuple[float, ...]) -> list[tuple[str, bytes]]:
    """(dtype string, bytes) of ``row`` in every stored dtype that holds it exactly."""
    values = np.asarray(row, np.float64)
    found = []
    for dtype in map(np.dtype, STORED_DTYPES):
        cast = values.astype(dtype)
        if np.array_equal(cast.astype(np.float64), values):
            found.append((dtype.str, cast.tobytes()))
    return found


def is_default_config() -> ColumnElement[bool]:
    """True for a measurement whose config is its collection's default row."""
    m = measurements.c
    clauses = []
    for spec in COLLECTIONS.values():
        if spec.default_config is None:
            continue
        shape = ",".join(map(str, spec.config_shape()))
        encoded = [
            and_(m.config_dtype == dtype, m.config == blob)
            for dtype, blob in default_encodings(spec.default_config)
        ]
        clauses.append(
            and_(m.collection == spec.name, m.config_shape == shape, or_(*encoded))
        )
    return or_(*clauses) if clauses else false()


def graph_summaries(conn: Connection) -> list[GraphSummary]:
    """One row per (model, collection, target, graph) that has measurements."""
    m = measurements.c
    default_ns = func.min(case((is_default_config(), m.runtime_ns), else_=None))
    query = select(
        m.model,
        m.collection,
        m.target,
        m.graph_id,
        func.count(),
        func.min(m.runtime_ns),
        default_ns,
    ).group_by(m.model, m.collection, m.target, m.graph_id)
    return [_summary(row) for row in conn.execute(query)]


def _summary(row: Any) -> GraphSummary:
    model, collection, target, graph_id, count, best, default = row
    return GraphSummary(
        model,
        collection,
        target,
        graph_id,
        int(count),
        int(best),
        None if default is None else int(default),
    )
