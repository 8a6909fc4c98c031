"""Measurements as table rows and back: a ``MeasurementBatch`` as rows of the
``measurements`` table (configs encoded by ``codec.py``), and selected rows as the
arrays of ``StoredRows``."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import numpy as np

from xla_costmodel.service.store import codec
from xla_costmodel.service.store.records import MeasurementBatch, StoredRows


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


def measured(rows: list[Any]) -> StoredRows:
    """Rows of (id, config, config_dtype, config_shape, runtime_ns, score, writer,
    compiler) as arrays."""
    configs = codec.decode_configs(
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
