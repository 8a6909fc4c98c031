"""The inference pool: the bounded worker threads the encoder, the scorer and the
other CPU-heavy steps of a request run in (graphs borrow it to featurize HLO, the
shaper to blend), and scoring in chunks.

    InferencePool.run(fn, *args)               fn in a worker thread, ``workers`` at once
    InferencePool.encode(runner, graph)        the graph's embedding (timed; sync)
    InferencePool.score(runner, embedding, checked, field)   float32 configs, scores
    await InferencePool.scored(...)            ``score``, inline for a few scorer rows
    stable_order(scores)                       the ranking: ascending, ties by index

onnxruntime releases the GIL, so encoder and scorer runs happen in worker threads,
limited to ``workers`` at once; a batch of at most ``INLINE_SCORE_ROWS`` scorer rows
is scored on the loop, quicker than the hop. The scorer sees at most ``chunk_rows``
rows per run (configs x configurable nodes), which bounds its working memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread
import numpy as np
import numpy.typing as npt

from xla_costmodel.runner import ArtifactRunner, Embedding
from xla_costmodel.service.core.inputs import as_float32
from xla_costmodel.tpugraphs.arrays import Graph

T = TypeVar("T")
# (configs, scores); configs in their wire dtype (int8 layout batches stay 4x smaller)
Scored = tuple[np.ndarray[Any, Any], npt.NDArray[np.float32]]
# Up to this many scorer rows (configs x configurable nodes), scoring runs on the event
# loop: the tile scorer takes ~20 us for 64 configs, the worker-thread hop more.
INLINE_SCORE_ROWS = 64
# Below this many scores numpy's stable argsort is as fast as the keyed sort.
KEYED_SORT_MIN = 2048


class StageEvents(Protocol):
    """What the pool reports (``xla_costmodel.service.metrics.models.StageMetrics`` implements it)."""

    def encoded(self, model: str, seconds: float) -> None: ...
    def scored(self, model: str, seconds: float, configs: int) -> None: ...


class InferencePool:
    def __init__(self, events: StageEvents, workers: int, chunk_rows: int) -> None:
        self.events = events
        self.chunk_rows = chunk_rows
        self._limiter = anyio.CapacityLimiter(workers)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread of the bounded pool."""
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    def encode(self, runner: ArtifactRunner, graph: Graph) -> Embedding:
        start = time.perf_counter()
        embedding = runner.encode(graph)
        self.events.encoded(runner.name, time.perf_counter() - start)
        return embedding

    def score(
        self,
        runner: ArtifactRunner,
        embedding: Embedding,
        checked: np.ndarray[Any, Any],
        field: str,
        report: bool = True,  # False: not a rank request (feedback), not in its metrics
    ) -> Scored:
        """The float32 configs and their scores, in a worker thread: the conversion
        from the wire dtype passes over every value, so it stays off the loop too."""
        start = time.perf_counter()
        configs = as_float32(checked, field)
        rows_per_config = int(np.prod(configs.shape[1:-1], dtype=np.int64))
        step = max(1, self.chunk_rows // max(1, rows_per_config))
        parts = [
            runner.score(embedding, configs[i : i + step])
            for i in range(0, len(configs), step)
        ]
        scores = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if report:
            self.events.scored(runner.name, time.perf_counter() - start, len(configs))
        return configs, scores

    async def scored(
        self,
        runner: ArtifactRunner,
        embedding: Embedding,
        checked: np.ndarray[Any, Any],
        field: str,
    ) -> Scored:
        """``score``; on the loop for a few scorer rows, which take less time than the
        hop to a worker thread and back (tens of microseconds)."""
        if int(np.prod(checked.shape[:-1], dtype=np.int64)) <= INLINE_SCORE_ROWS:
            return self.score(runner, embedding, checked, field)
        return await self.run(self.score, runner, embedding, checked, field)


def stable_order(scores: npt.NDArray[np.float32]) -> npt.NDArray[np.int64]:
    """``np.argsort(scores, kind="stable")``: ascending, ties by index, NaN last.

    numpy's stable argsort of float32 is slow from a few thousand values on (10k:
    0.9 ms); one plain sort of 64-bit keys, the score's order-preserving bits above
    its index, gives the same order ~5x faster. -0.0 is made +0.0 and every NaN the
    positive one, so they tie and sort as numpy's comparisons do.
    """
    if len(scores) < KEYED_SORT_MIN:
        return np.argsort(scores, kind="stable").astype(np.int64)
    canonical = np.where(np.isnan(scores), np.float32(np.nan), scores + np.float32(0))
    bits = canonical.astype(np.float32, copy=False).view(np.uint32).astype(np.uint64)
    # Negative floats: flip every bit (more negative = smaller); others: set the sign.
    flip = np.where(bits >> 31, np.uint64(0xFFFFFFFF), np.uint64(0x80000000))
    keys = ((bits ^ flip) << 32) | np.arange(len(scores), dtype=np.uint64)
    keys.sort()
    return (keys & np.uint64(0xFFFFFFFF)).astype(np.int64)
