"""What raw layout configs need to know about a graph: its configurable nodes.

A graph_id hashes arrays, which carry no instruction names, so a rank request that
names a graph by id and keys its layouts by name needs a record kept with the graph:
the configurable nodes' ids, their names and tensor ranks when the graph arrived as
HLO text, the ids alone when it arrived as arrays. Records live next to the
embeddings, in a tiered cache (``xla_costmodel.service.core.tiered``): an in-process
LRU, then Redis under ``costmodel:meta:v2:<graph_id>[:<names_id>]`` (JSON, the
cache's TTL). Like the embedding cache, this is best-effort: a Redis failure is a
miss, a log line and a metric.

Two modules with identical arrays but different instruction names share a graph_id,
so a record is keyed by the graph *and* its naming (``names_id``, a hash of the names
in node order) and never replaced (``SET NX``): re-uploading a module with permuted
names cannot re-map what another client's names mean. The namings a graph was
uploaded with are a set (in memory, and ``costmodel:meta:v2:<graph_id>:namings`` in
Redis, sealed members); ``get`` by id answers the one naming, or
``GraphMetadataAmbiguous`` when there are several (the request then sends the module
inline, whose own names are used). The unnamed record (ids alone, from arrays) is
the answer only where no naming is known.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

from xla_costmodel.service.core.errors import GraphMetadataAmbiguous
from xla_costmodel.service.core.lru import LRU
from xla_costmodel.service.core.redis_store import (
    CacheUnavailable,
    RedisStore,
    meta_key,
    namings_key,
)
from xla_costmodel.service.core.tiered import CacheEvents, Codec, TieredCache
from xla_costmodel.tpugraphs.arrays import Graph

log = logging.getLogger(__name__)
MEMORY_BYTES = 32 << 20  # records are small: ids, names, ranks of configurable nodes
NAMINGS = 65_536  # graphs whose namings this process remembers


class MetaKey(NamedTuple):
    """Names one record of a graph (in Redis under ``meta_key(*key)``)."""

    graph_id: str
    names_id: str | None  # None: the unnamed record


class MetaError(ValueError):
    """Bytes that are not a graph record."""


@dataclass(frozen=True)
class GraphMeta:
    node_config_ids: tuple[int, ...]
    names: tuple[str, ...] | None = None  # aligned with the ids; None: sent as arrays
    tensor_ranks: tuple[tuple[int, ...], ...] | None = None  # output, input, kernel

    @property
    def names_id(self) -> str | None:
        """16 hex digits naming this naming of the graph (None: unnamed)."""
        if self.names is None:
            return None
        text = json.dumps(self.names, separators=(",", ":")).encode()
        return hashlib.sha256(text).hexdigest()[:16]

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


def _meta_key(key: MetaKey) -> str:
    return meta_key(*key)


RECORDS: Codec[MetaKey, GraphMeta] = Codec(
    _meta_key,
    GraphMeta.dumps,
    GraphMeta.loads,
    "graph record",
    ops="meta_",
    kind="record",
)


class GraphMetaStore:
    def __init__(
        self,
        redis: RedisStore | None,
        events: CacheEvents,
        max_bytes: int = MEMORY_BYTES,
    ) -> None:
        self.tier = TieredCache(LRU(max_bytes, _weigh), redis, RECORDS, events)
        self.events = events
        self._namings: LRU[str, frozenset[str]] = LRU(NAMINGS)

    async def get(self, graph_id: str) -> GraphMeta | None:
        """The graph's one named record, else its unnamed one (None: neither is
        known); ``GraphMetadataAmbiguous`` if it was uploaded with several namings."""
        namings = (self._namings.get(graph_id) or frozenset()) | await self._shared(
            graph_id
        )
        if len(namings) > 1:
            raise GraphMetadataAmbiguous(
                f"graph {graph_id} was uploaded with {len(namings)} different "
                "namings of its instructions, so names in raw_configs are ambiguous "
                "by graph_id: send the module inline as hlo",
                "raw_configs",
            )
        for names_id in namings:
            found = await self.tier.get(MetaKey(graph_id, names_id))
            if found is not None:
                return found[0]
        found = await self.tier.get(MetaKey(graph_id, None))
        return None if found is None else found[0]

    async def remember(self, graph_id: str, meta: GraphMeta) -> None:
        """Keep ``meta`` under its graph and naming; a kept record is never replaced."""
        names_id = meta.names_id
        key = MetaKey(graph_id, names_id)
        if names_id is not None:
            known = self._namings.get(graph_id) or frozenset()
            self._namings.put(graph_id, known | {names_id})
        if self.tier.memory_get(key) is not None:
            return  # same key, same record
        self.tier.memory_put(key, meta)
        await self.tier.redis_set(key, meta, nx=True)
        redis = self.tier.redis
        if names_id is not None and redis is not None and redis.available:
            try:
                await redis.add_member(namings_key(graph_id), names_id.encode())
            except CacheUnavailable as exc:
                self.tier.failed("set", key, exc)

    async def _shared(self, graph_id: str) -> frozenset[str]:
        """The namings other processes uploaded (through Redis), best-effort."""
        redis = self.tier.redis
        if redis is None or not redis.available:
            return frozenset()
        try:
            found, forged = await redis.members(namings_key(graph_id))
        except CacheUnavailable as exc:
            self.tier.failed("get", MetaKey(graph_id, None), exc)
            return frozenset()
        for _ in range(forged):
            self.events.redis_integrity_failure("record")
        return frozenset(m.decode("ascii", "replace") for m in found)
