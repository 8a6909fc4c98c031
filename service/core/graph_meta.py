"""What raw layout configs need to know about a graph: its configurable nodes.

A graph_id hashes arrays, which carry no instruction names, so a rank request that
names a graph by id and keys its layouts by name needs a record kept with the graph:
the configurable nodes' ids, their names and tensor ranks when the graph arrived as
HLO text, the ids alone when it arrived as arrays. Records live next to the
embeddings, in a tiered cache (``xla_costmodel.service.core.tiered``): an in-process
LRU, then Redis under ``costmodel:meta:v1:<graph_id>`` (JSON, the cache's TTL). Like
the embedding cache, this is best-effort: a Redis failure is a miss, a log line and a
metric.

A named record is never replaced by an unnamed one (Redis ``SET NX`` for those), so
uploading a module as arrays after its text does not forget the names. Two modules
with identical arrays but different names share a graph_id; the last upload's names
win.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from xla_costmodel.service.core.lru import LRU
from xla_costmodel.service.core.redis_store import RedisStore, meta_key
from xla_costmodel.service.core.tiered import CacheEvents, Codec, TieredCache
from xla_costmodel.tpugraphs.arrays import Graph

MEMORY_BYTES = 32 << 20  # records are small: ids, names, ranks of configurable nodes


class MetaError(ValueError):
    """Bytes that are not a graph record."""


@dataclass(frozen=True)
class GraphMeta:
    node_config_ids: tuple[int, ...]
    names: tuple[str, ...] | None = None  # aligned with the ids; None: sent as arrays
    tensor_ranks: tuple[tuple[int, ...], ...] | None = None  # output, input, kernel

    @classmethod
    def of_graph(cls, graph: Graph) -> GraphMeta | None:
        """The unnamed record of a layout graph sent as arrays (None for tile)."""
        ids = graph.node_config_ids
        return None if ids is None else cls(tuple(int(i) for i in ids))

    def dumps(self) -> bytes:
        return json.dumps(
            {
                "ids": self.node_config_ids,
                "names": self.names,
                "ranks": self.tensor_ranks,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def loads(cls, blob: bytes) -> GraphMeta:
        try:
            body = json.loads(blob)
            ids = tuple(_ints(body["ids"]))
            names, ranks = body["names"], body["ranks"]
            if names is not None and (
                len(names) != len(ids) or not all(isinstance(n, str) for n in names)
            ):
                raise MetaError("names do not match the ids")
            if ranks is not None and len(ranks) != len(ids):
                raise MetaError("ranks do not match the ids")
        except (ValueError, KeyError, TypeError) as exc:
            raise MetaError(f"not a graph record: {exc}") from None
        return cls(
            ids,
            None if names is None else tuple(names),
            None if ranks is None else tuple(tuple(_ints(r)) for r in ranks),
        )


def _ints(values: Any) -> list[int]:
    if not isinstance(values, list) or not all(type(v) is int for v in values):
        raise MetaError("expected a list of integers")
    return values


def _weigh(meta: GraphMeta) -> int:
    return len(meta.dumps())


RECORDS: Codec[str, GraphMeta] = Codec(
    meta_key, GraphMeta.dumps, GraphMeta.loads, "graph record", ops="meta_"
)


class GraphMetaStore:
    def __init__(
        self,
        redis: RedisStore | None,
        events: CacheEvents,
        max_bytes: int = MEMORY_BYTES,
    ) -> None:
        self.tier = TieredCache(LRU(max_bytes, _weigh), redis, RECORDS, events)

    async def get(self, graph_id: str) -> GraphMeta | None:
        """The graph's record, preferring a named one (another replica may have it)."""
        found = self.tier.recall(graph_id)
        if found is not None and found.names is not None:
            return found
        stored = await self.tier.fetch(graph_id)
        if stored is not None and (found is None or stored.names is not None):
            self.tier.memory.put(graph_id, stored)
            return stored
        return found

    async def remember(self, graph_id: str, meta: GraphMeta) -> None:
        """Keep ``meta`` unless an at least as good record is already kept here."""
        kept = self.tier.memory.get(graph_id)
        if kept is not None and (kept.names is not None or meta.names is None):
            return
        self.tier.memory.put(graph_id, meta)
        await self.tier.store(graph_id, meta, nx=meta.names is None)
