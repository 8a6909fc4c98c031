"""Graphs kept in the measurement database, so what is measured on them can be
exported and trained on later (and feedback reaches a replica that never saw them).

    GraphArchive.keep(gid, collection, graph)   store once, on first sight; best-effort
    GraphArchive.load(gid)                      the stored graph, or None

Keeping is best-effort: ranking never fails because the database is down (the graph
is kept on a later sight, or sent inline with feedback). Which ids this process has
kept is remembered, so a graph costs one write per process at most.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import numpy as np

from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.lru import LRU
from xla_costmodel.service.store import StoreError
from xla_costmodel.tpugraphs.arrays import Graph, make_graph

log = logging.getLogger(__name__)


class ArchiveEvents(Protocol):
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


class GraphArchive:
    def __init__(self, db: Database, events: ArchiveEvents, remember: int = 65_536):
        self.db = db
        self.events = events
        self._kept: LRU[str, bool] = LRU(remember)  # ids stored, most recent last

    def kept(self, gid: str) -> bool:
        return gid in self._kept

    def forget(self, gid: str) -> None:
        """The database does not hold it after all (restored from a backup, say):
        the next sight stores it again."""
        self._kept.discard(gid)

    async def keep(self, gid: str, collection: str, graph: Graph) -> bool:
        """Store the graph unless this process already did; False if it could not."""
        if self._kept.get(gid):  # and now the most recent
            return True
        arrays = graph_arrays(graph)
        try:
            await self.db.run(lambda s: s.save_graph(gid, collection, arrays))
        except StoreError as exc:
            self.events.store_error("save_graph")
            log.warning(
                "graph not archived", extra={"graph_id": gid, "error": str(exc)}
            )
            return False
        self._kept.put(gid, True)
        return True

    async def load(self, gid: str) -> Graph | None:
        """The stored graph (``StoreUnavailable`` if the database is down)."""
        stored = await self.db.run(lambda s: s.load_graph(gid))
        if stored is None:
            return None
        a = stored.arrays
        self._kept.put(gid, True)
        return make_graph(
            a["node_feat"],
            a["node_opcode"],
            a["edge_index"],
            a.get("node_config_ids"),
            a.get("node_splits"),
        )
