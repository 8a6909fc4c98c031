"""Measurements as table rows and back: a ``MeasurementBatch`` as rows of the
``measurements`` table (configs encoded by ``codec.py``), and selected rows as the
arrays of ``StoredRows``.

Configs are read back in today's rows of their collection (``decoded_configs``): a
row stored in an older spec's shape (``xla_cpu/1``'s "17") is upgraded as it is
read. Revision 0005 rewrote the rows stored before it; this covers the ones a
replica still running the older release writes during a rolling upgrade.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import numpy as np

from xla_costmodel.service.store import codec
from xla_costmodel.service.store.errors import StoreError
from xla_costmodel.service.store.records import MeasurementBatch, StoredRows
from xla_costmodel.tpugraphs.collections import COLLECTIONS


def measurement_rows(batch: MeasurementBatch) -> list[dict[str, Any]]:
    """The batch as rows of ``measurements``, one per config (a NaN score: NULL)."""
    blobs, dtype, shape = codec.encode_configs(np.asarray(batch.configs))
    runtimes = np.asarray(batch.runtimes_ns, dtype=np.int64).tolist()
    if batch.scores is None:
        scores: list[float | None] = [None] * len(blobs)
    else:
        scores = [
            None if math.isnan(s) else s
            for s in np.asarray(batch.scores, dtype=np.float64).tolist()
        ]
    now = datetime.now(UTC)
    common = {
        "time": now,
        "model": batch.model,
        "model_version": batch.model_version,
        "collection": batch.collection,
        "target": batch.target,
        "graph_id": batch.graph_id,
        "config_dtype": dtype,
        "config_shape": shape,
        "request_id": batch.request_id,
        "source": batch.source,
        "writer": batch.writer,
        "compiler": batch.compiler,
    }
    return [
        {**common, "config": blob, "runtime_ns": rt, "score": score}
        for blob, rt, score in zip(blobs, runtimes, scores, strict=True)
    ]


def decoded_configs(
    collection: str, blobs: list[bytes], dtypes: list[str], shapes: list[str]
) -> np.ndarray[Any, Any]:
    """Stored configs of ``collection`` as float32 [N, ...] in today's rows (an older
    spec's upgraded); ``codec.decode_configs`` when no row has an older shape."""
    distinct = sorted(set(shapes))
    if not _older(collection, distinct):
        return codec.decode_configs(blobs, dtypes, shapes)
    spec = COLLECTIONS[collection]
    out = np.empty((len(blobs), spec.width), np.float32)
    for shape in distinct:
        at = [i for i, s in enumerate(shapes) if s == shape]
        part = codec.decode_configs(
            [blobs[i] for i in at], [dtypes[i] for i in at], [shape] * len(at)
        )
        try:
            out[at] = spec.upgrade(part)
        except ValueError as exc:
            raise StoreError(f"stored {collection} configs: {exc}") from None
    return out


def _older(collection: str, shapes: list[str]) -> bool:
    """Whether rows of ``shapes`` are an older spec's rows of the collection."""
    spec = COLLECTIONS.get(collection)
    if spec is None or spec.per_node:
        return False
    return any(s in {str(o.width) for o in spec.older} for s in shapes)


def measured(rows: list[Any], collection: str) -> StoredRows:
    """Rows of (id, config, config_dtype, config_shape, runtime_ns, score, writer,
    compiler) of ``collection`` as arrays."""
    configs = decoded_configs(
        collection,
        [bytes(r.config) for r in rows],
        [r.config_dtype for r in rows],
        [r.config_shape for r in rows],
    )
    scores = [math.nan if r.score is None else r.score for r in rows]
    return StoredRows(
        configs=configs,
        runtimes_ns=np.array([r.runtime_ns for r in rows], dtype=np.int64),
        scores=np.array(scores, dtype=np.float32),
        ids=np.array([r.id for r in rows], dtype=np.int64),
        writers=tuple(r.writer for r in rows),
        compilers=tuple(r.compiler for r in rows),
    )
