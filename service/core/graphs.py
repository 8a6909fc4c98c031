"""Graphs as requests bring them: validated, featurized, archived and embedded.

    Graphs.graph(raw, runner) -> (graph, gid)       validate (HLO: featurize), keep
                                                    its record, hold it for feedback
    Graphs.embed(runner, gid, graph) -> (embedding, source)   cached, else encoded
    Graphs.cached(runner, gid) -> (embedding, source)   by id alone; GraphNotFound
    Graphs.known(runner, gid) -> (embedding, source)    by id, else from the graph
                                                        held or archived
    Graphs.admit(raw, runner) -> (graph, gid, record)   ``graph``, with its own record
    Graphs.raw_configs(raw, runner, gid, record)    raw configs against the request's
                                                    own record, else the kept one
    Graphs.summary(gid) -> summary | None           its opcode summary, for the
                                                    target's knowledge (``blend``)
    await Graphs.summaries(gids) -> {gid: summary}  those of measured graphs, else
                                                    from the archive (the refresher)

HLO text is featurized, and large arrays checked, off the loop (pure Python, seconds
for a big module); encoding runs in the bounded inference pool.
"""

from __future__ import annotations

from collections.abc import Iterable

import anyio.to_thread
import numpy as np
import numpy.typing as npt

from xla_costmodel.runner import ArtifactRunner, Embedding
from xla_costmodel.service.core.cache import CacheKey, EmbeddingCache, Found
from xla_costmodel.service.core.errors import GraphMetadataNotFound, GraphNotFound
from xla_costmodel.service.core.graph_archive import GraphArchive
from xla_costmodel.service.core.graph_meta import GraphMeta, GraphMetaStore
from xla_costmodel.service.core.hlo import HloText, check_hlo_size, featurize_graph
from xla_costmodel.service.core.inference import InferencePool
from xla_costmodel.service.core.inputs import (
    INLINE_BYTES,
    Limits,
    RawGraph,
    build_graph,
)
from xla_costmodel.service.core.lru import LRU
from xla_costmodel.service.core.raw_configs import RawConfigs, encode_raw
from xla_costmodel.service.store import StoreError
from xla_costmodel.tpugraphs import knowledge as kn
from xla_costmodel.tpugraphs.arrays import Graph

Summary = npt.NDArray[np.float64]  # ``tpugraphs.knowledge.summarize``: 2 KiB
# Opcode summaries kept per process (8 MiB): more graphs than a target's knowledge
# keeps programs (``knowledge.MAX_PROGRAMS``), so a refit reads only new ones.
SUMMARIES = 4096


class Graphs:
    def __init__(
        self,
        limits: Limits,
        cache: EmbeddingCache,
        records: GraphMetaStore,
        archive: GraphArchive,
        pool: InferencePool,
        summaries: int = SUMMARIES,
    ) -> None:
        self.limits = limits
        self.cache = cache
        self.records = records
        self.archive = archive
        self.pool = pool
        # Each graph's opcode summary, by id: of graphs admitted with a model that
        # has target knowledge (a default config), and of graphs measured on a
        # target (``summaries``); the newest ``summaries`` graphs'.
        self._summaries: LRU[str, Summary] = LRU(summaries)

    async def graph(
        self, raw: RawGraph | HloText, runner: ArtifactRunner
    ) -> tuple[Graph, str]:
        """Validate (HLO text: featurize, always off the loop), keep its record, and
        hold it for feedback (``admit``)."""
        graph, gid, _ = await self.admit(raw, runner)
        return graph, gid

    async def admit(
        self, raw: RawGraph | HloText, runner: ArtifactRunner
    ) -> tuple[Graph, str, GraphMeta | None]:
        """``graph``, and the record of the graph as this request sent it.

        Validate (HLO text: featurize, always off the loop), keep its record, and
        hold it for feedback (memory and Redis: never the database, which a
        writer's feedback alone writes to)."""
        meta: GraphMeta | None
        if isinstance(raw, HloText):
            check_hlo_size(raw, self.limits)
            # In the bounded pool: pure Python, seconds for a big module.
            graph, gid, meta = await self.pool.run(
                featurize_graph, raw, runner.collection, self.limits
            )
        else:
            args = (raw, runner.collection, self.limits)
            if raw.nbytes <= INLINE_BYTES:
                graph, gid = build_graph(*args)
            else:
                graph, gid = await anyio.to_thread.run_sync(build_graph, *args)
            meta = GraphMeta.of_graph(graph)
        if meta is not None:
            await self.records.remember(gid, meta)
        if runner.manifest.spec.default_config is not None:  # knowledge needs one
            self._summarize(gid, graph)
        await self.archive.hold(gid, graph)
        return graph, gid, meta

    async def embed(self, runner: ArtifactRunner, gid: str, graph: Graph) -> Found:
        """The graph's embedding: cached, else encoded in the pool (once per key)."""

        async def compute() -> Embedding:
            return await self.pool.run(self.pool.encode, runner, graph)

        key = CacheKey(runner.name, runner.version, gid)
        return await self.cache.get_or_compute(key, runner.embedding_shapes, compute)

    async def cached(self, runner: ArtifactRunner, gid: str) -> Found:
        """The cached embedding of a graph named by id (``GraphNotFound`` if none)."""
        key = CacheKey(runner.name, runner.version, gid)
        found = await self.cache.lookup(key, runner.embedding_shapes)
        if found is None:
            raise GraphNotFound(
                f"graph {gid} is not cached for {runner.name} v{runner.version}; "
                "upload it with PUT /v1/graphs or send it inline",
                "graph_id",
            )
        return found

    async def known(self, runner: ArtifactRunner, gid: str) -> Found:
        """The cached embedding, else one computed from the graph held or archived
        (feedback reaching a replica or a restart that never ranked this graph)."""
        try:
            return await self.cached(runner, gid)
        except GraphNotFound:
            try:
                graph = await self.archive.find(gid)
            except StoreError:
                graph = None
            # A graph of the model's shape (archived by another collection's model
            # too: a graph is stored once, by content).
            if (
                graph is None
                or (graph.node_config_ids is not None) != runner.spec.per_node
            ):
                raise
            return await self.embed(runner, gid, graph)

    async def raw_configs(
        self,
        raw: RawConfigs,
        runner: ArtifactRunner,
        gid: str,
        sent: GraphMeta | None = None,
    ) -> npt.NDArray[np.float32]:
        """Raw configs as the model's config arrays, resolved against the graph's
        record of its configurable nodes (layout): ``sent``, the request's own when
        it has names (HLO sent inline: its names mean what its sender meant), else
        the kept one (``GraphMetadataAmbiguous`` if uploads named it differently),
        else ``sent`` (arrays: ids alone)."""
        meta = None
        if runner.spec.per_node:  # raw configs name the graph's configurable nodes
            if sent is not None and sent.names is not None:
                meta = sent
            else:
                meta = await self.records.get(gid) or sent
            if meta is None:
                raise GraphMetadataNotFound(
                    f"no record of graph {gid}'s configurable nodes (it was cached "
                    "before, or its record expired): re-upload it with PUT /v1/graphs, "
                    "or send it inline as hlo or graph",
                    raw.field,
                )
        return await anyio.to_thread.run_sync(
            encode_raw, raw, runner.collection, meta, self.limits.max_configs
        )

    def summary(self, gid: str) -> Summary | None:
        """The opcode summary of a graph admitted before (or measured on a target):
        None for a collection without a default config, or one long forgotten."""
        return self._summaries.get(gid)

    async def summaries(self, gids: Iterable[str]) -> dict[str, Summary]:
        """The opcode summaries of measured graphs, for the target's knowledge:
        kept, else from the graph held or archived; a graph gone from the archive
        has none (``StoreUnavailable`` if the database is down)."""
        found: dict[str, Summary] = {}
        for gid in gids:
            summary = self._summaries.get(gid)
            if summary is None:
                graph = await self.archive.find(gid)
                if graph is None:
                    continue
                summary = self._summarize(gid, graph)
            found[gid] = summary
        return found

    def _summarize(self, gid: str, graph: Graph) -> Summary:
        summary = self._summaries.get(gid)
        if summary is None:
            summary = kn.summarize(graph.node_opcode)
            self._summaries.put(gid, summary)
        return summary
