"""In-process phases: the tile scorer alone in onnxruntime, the layout encoder alone,
and the same tile model in PyTorch eager. No server, no HTTP: the baselines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from xla_costmodel.bench.data import F32
from xla_costmodel.bench.timing import Timings, time_calls
from xla_costmodel.runner import ArtifactRunner, Embedding, SessionOptions
from xla_costmodel.tpugraphs.arrays import Graph


@dataclass(frozen=True)
class Budget:
    """How many timed repeats, and the wall-clock cap on them."""

    repeats: int
    seconds: float


def open_runner(artifact_dir: Path, threads: int) -> ArtifactRunner:
    return ArtifactRunner(artifact_dir, SessionOptions(intra_op_threads=threads))


def raw_scorer(
    runner: ArtifactRunner, embedding: Embedding, configs: F32, budget: Budget
) -> Timings:
    """``scorer.onnx`` on one batch; the embedding is computed once, outside the timing."""
    return time_calls(
        lambda: runner.score(embedding, configs), budget.repeats, budget.seconds
    )


def raw_sweep(
    runner: ArtifactRunner,
    embedding: Embedding,
    pool: F32,
    sizes: Sequence[int],
    budget: Budget,
) -> dict[int, Timings]:
    """Scorer latency per batch size; sizes above the pool repeat its rows."""
    return {n: raw_scorer(runner, embedding, take_rows(pool, n), budget) for n in sizes}


def encoder(runner: ArtifactRunner, graph: Graph, budget: Budget) -> Timings:
    return time_calls(lambda: runner.encode(graph), budget.repeats, budget.seconds)


def take_rows(pool: F32, n: int) -> F32:
    """The first ``n`` rows of ``pool``, tiled when ``n`` exceeds it."""
    if n <= pool.shape[0]:
        return pool[:n]
    reps = -(-n // pool.shape[0])
    return np.ascontiguousarray(np.tile(pool, (reps, 1))[:n])
