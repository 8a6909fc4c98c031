"""Graphs held for feedback, and archived in the measurement database only when a
writer's feedback needs them (so what is measured on them can be exported and
trained on later).

    GraphArchive.hold(gid, graph)             ranks and uploads: memory (and Redis)
    GraphArchive.find(gid) -> Graph | None    held, else archived
    GraphArchive.pending(gid, collection)     feedback: the row to archive with its
                                              measurements, None if already stored

Anonymous requests never write to the database: a graph a rank or an upload brings
is held in a byte-bounded LRU, and in Redis when it is small enough for one SET, so
feedback by ``graph_id`` reaching another worker or replica finds it. Feedback
archives it in the transaction that stores its measurements, where the writer's
archived bytes are capped (``MeasurementStore.add_measurements``). Compressing it
runs in a plain worker thread, never on a database slot. A graph held nowhere (evicted,
or never sent here) is 404 ``graph_not_found`` for feedback by id: the client sends
it inline. Which ids the database holds is remembered, so feedback on a known graph
costs no check.
"""

from __future__ import annotations

import io
import logging
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio.to_thread
import numpy as np

from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.lru import LRU
from xla_costmodel.service.core.redis_store import RedisStore
from xla_costmodel.service.core.tiered import CacheEvents, Codec, TieredCache
from xla_costmodel.service.store import StoreError
from xla_costmodel.service.store.codec import encode_graph
from xla_costmodel.service.store.records import GraphRow
from xla_costmodel.tpugraphs.arrays import Graph, make_graph
from xla_costmodel.tpugraphs.npz import NpzError, read_npz

log = logging.getLogger(__name__)
# Graphs waiting for feedback, per process: a tuner's feedback follows its rank
# within minutes; an evicted graph costs the client one inline resend.
HELD_BYTES = 64 << 20
# Larger graphs stay in this process: a SET much larger would not fit the Redis
# client's short socket timeout (as for remembered rankings).
SHARED_BYTES = 8 << 20
HELD_PREFIX = "costmodel:held:v1"


class ArchiveEvents(CacheEvents, Protocol):
    def store_error(self, op: str) -> None: ...


def graph_arrays(graph: Graph) -> dict[str, np.ndarray[Any, Any]]:
    arrays: dict[str, np.ndarray[Any, Any]] = {
        "node_feat": graph.node_feat,
        "node_opcode": graph.node_opcode,
        "edge_index": graph.edge_index,
    }
    if graph.node_config_ids is not None:
        arrays["node_config_ids"] = graph.node_config_ids
    if graph.node_splits is not None:
        arrays["node_splits"] = graph.node_splits
    return arrays


def _key(gid: str) -> str:
    return f"{HELD_PREFIX}:{gid}"


def _dumps(graph: Graph) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **graph_arrays(graph))  # type: ignore[arg-type]
    return buffer.getvalue()


def _loads(data: bytes) -> Graph:
    try:
        a = read_npz(data, 4 * len(data))  # stored members: decoded ~= the bytes
    except NpzError as exc:
        raise ValueError(f"not a held graph: {exc}") from None
    return _graph(a)


def _graph(a: dict[str, np.ndarray[Any, Any]]) -> Graph:
    return make_graph(
        a["node_feat"],
        a["node_opcode"],
        a["edge_index"],
        a.get("node_config_ids"),
        a.get("node_splits"),
    )


def _row(gid: str, collection: str, graph: Graph) -> GraphRow:
    return GraphRow(
        gid,
        collection,
        encode_graph(graph_arrays(graph)),
        graph.num_nodes,
        datetime.now(UTC),
    )


class GraphArchive:
    def __init__(
        self,
        db: Database,
        events: ArchiveEvents,
        redis: RedisStore | None = None,
        held_bytes: int = HELD_BYTES,
        remember: int = 65_536,
    ):
        self.db = db
        self.events = events
        codec = Codec(_key, _dumps, _loads, "held graph", "held_", kind="held_graph")
        memory: LRU[str, Graph] = LRU(held_bytes, lambda g: g.nbytes)
        self.held = TieredCache(memory, redis, codec, events)
        self._kept: LRU[str, bool] = LRU(remember)  # ids stored, most recent last

    async def hold(self, gid: str, graph: Graph) -> None:
        """Keep a graph a request brought (never in the database)."""
        if self.held.memory_has(gid) or self._kept.get(gid):
            return
        self.held.memory_put(gid, graph)
        if graph.nbytes <= SHARED_BYTES:
            await self.held.redis_set(gid, graph)

    def kept(self, gid: str) -> bool:
        return gid in self._kept

    def stored(self, gid: str) -> None:
        """The database holds it now (its feedback committed)."""
        self._kept.put(gid, True)

    def forget(self, gid: str) -> None:
        """The database does not hold it after all (restored from a backup, say)."""
        self._kept.discard(gid)

    async def pending(self, gid: str, collection: str) -> GraphRow | None:
        """The graph as a row to archive with a writer's measurements; None when the
        database holds it (or nobody here does: the store then says which)."""
        if self._kept.get(gid):
            return None
        found = await self.held.get(gid)
        if found is None:
            return None
        try:
            if await self.db.run(lambda s: s.has_graph(gid), writers=True):
                self.stored(gid)
                return None
        except StoreError:
            pass  # storing the measurements will say so
        return await anyio.to_thread.run_sync(_row, gid, collection, found[0])

    async def find(self, gid: str) -> Graph | None:
        """The held graph, else the archived one (``StoreUnavailable`` if the
        database is down)."""
        found = await self.held.get(gid)
        if found is not None:
            return found[0]
        stored = await self.db.run(lambda s: s.load_graph(gid))
        if stored is None:
            return None
        self.stored(gid)
        return _graph(stored.arrays)
