"""``MeasurementStore``: graphs and measured runtimes in SQLite or PostgreSQL.

One code path for both databases (SQLAlchemy Core; dialect details live in
``engine.py``). Every method blocks and is safe to call from many threads at once:
each call checks a connection out of the engine's pool for one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import Connection, Engine, Select, Table, delete, exists, func, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import Insert

from xla_costmodel.service.store import codec
from xla_costmodel.service.store.decisions import DecisionTable
from xla_costmodel.service.store.engine import WRITE, create_store_engine
from xla_costmodel.service.store.errors import (
    IdempotencyKeyReused,
    StoreError,
    UnknownGraph,
    translated,
)
from xla_costmodel.service.store.keys import replayed
from xla_costmodel.service.store.migrate import check_current, upgrade
from xla_costmodel.service.store.records import (
    AddResult,
    MeasurementBatch,
    StoredGraph,
    StoredRows,
)
from xla_costmodel.service.store.rows import measured, measurement_rows
from xla_costmodel.service.store.schema import feedback_keys, graphs, measurements
from xla_costmodel.service.store.summary import GraphSummary, graph_summaries
from xla_costmodel.service.store.writers import (
    WriterTable,
    check_graph_bytes,
    check_quota,
    scoped_key,
)
from xla_costmodel.service.store.writers import lock as lock_writer


class MeasurementStore:
    """Open with ``MeasurementStore.open(url)``; ``close()`` when done."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._writer = engine.execution_options(**{WRITE: True})
        self._dialect = engine.dialect.name
        self.writers = WriterTable(self._transaction)
        self.decisions = DecisionTable(self._transaction, self._insert_ignore)

    @classmethod
    def open(cls, url: str, *, migrate: bool = True) -> MeasurementStore:
        """Connect to ``url`` and bring its schema to head (or check it is there)."""
        engine = create_store_engine(url)
        try:
            where = engine.url.render_as_string(hide_password=True)
            with translated(engine.dialect.name, f"opening {where}"):
                upgrade(engine) if migrate else check_current(engine)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine)

    def close(self) -> None:
        self._engine.dispose()

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._dialect

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for tools and tests)."""
        return self._engine

    def ping(self) -> None:
        """Raise ``StoreUnavailable`` unless the database answers a query."""
        with self._transaction("ping") as conn:
            conn.execute(select(1)).scalar_one()

    def save_graph(
        self, graph_id: str, collection: str, arrays: Mapping[str, np.ndarray[Any, Any]]
    ) -> bool:
        """Store a graph once (content-addressed); True if it was new."""
        if "node_feat" not in arrays:
            raise ValueError("graph arrays need node_feat")
        if self.has_graph(graph_id):  # skip compressing a graph we already hold
            return False
        row = {
            "graph_id": graph_id,
            "collection": collection,
            "arrays": codec.encode_graph(arrays),
            "num_nodes": int(np.shape(arrays["node_feat"])[0]),
            "first_seen": datetime.now(UTC),
        }
        with self._transaction("saving a graph", write=True) as conn:
            inserted = conn.execute(self._insert_ignore(graphs, "graph_id"), row)
            return inserted.first() is not None

    def has_graph(self, graph_id: str) -> bool:
        query = select(graphs.c.graph_id).where(graphs.c.graph_id == graph_id)
        with self._transaction("reading a graph") as conn:
            return conn.execute(query).first() is not None

    def load_graph(self, graph_id: str) -> StoredGraph | None:
        query = select(graphs.c.collection, graphs.c.arrays, graphs.c.first_seen).where(
            graphs.c.graph_id == graph_id
        )
        with self._transaction("reading a graph") as conn:
            row = conn.execute(query).first()
        if row is None:
            return None
        arrays = codec.decode_graph(bytes(row.arrays))
        return StoredGraph(graph_id, row.collection, arrays, row.first_seen)

    def add_measurements(self, batch: MeasurementBatch) -> AddResult:
        """Store a batch in one transaction, idempotently when it carries a key.

        A writer's transactions are serialised (``writers.lock``) so its quotas
        hold under concurrency; the batch's ``graph`` is archived here if the
        database lacks it, within the writer's cap of archived bytes.

        Raises ``UnknownGraph`` (save the graph first), ``IdempotencyKeyReused`` (the
        key came before with another request hash), ``WriterQuotaExceeded``,
        ``ValueError`` for a malformed batch, ``StoreUnavailable`` when the database
        cannot take it.
        """
        batch.validate()
        rows = measurement_rows(batch)
        quota = batch.quota if batch.writer is not None else None
        with self._transaction("storing measurements", write=True) as conn:
            if batch.writer is not None:
                lock_writer(conn, batch.writer)
            if batch.idempotency_key is not None:
                seen = _replay(conn, batch)
                if seen is not None:
                    return seen
            if not _graph_exists(conn, batch.graph_id):
                self._archive(conn, batch)
            if quota is not None and batch.writer is not None:
                check_quota(conn, batch.writer, len(rows), quota)
            if batch.idempotency_key is not None:
                key_row = {
                    "key": scoped_key(batch.idempotency_key, batch.writer),
                    "request_hash": batch.request_hash or "",
                    "response": json.dumps(batch.response),
                    "created": datetime.now(UTC),
                }
                inserted = conn.execute(
                    self._insert_ignore(feedback_keys, "key"), key_row
                )
                if inserted.first() is None:  # a concurrent request won the race
                    seen = _replay(conn, batch)
                    if seen is None:
                        raise StoreError("idempotency key vanished during a race")
                    return seen
            try:
                conn.execute(measurements.insert(), rows)
            except sa_exc.IntegrityError:  # the graph was pruned since the check
                raise UnknownGraph(f"graph {batch.graph_id} is not stored") from None
        return AddResult(stored=len(rows), duplicate=False, response=None)

    def _archive(self, conn: Connection, batch: MeasurementBatch) -> None:
        """Store the batch's graph (``UnknownGraph`` if it brought none)."""
        graph = batch.graph
        if graph is None or graph.graph_id != batch.graph_id:
            raise UnknownGraph(f"graph {batch.graph_id} is not stored")
        if batch.quota is not None and batch.writer is not None:
            check_graph_bytes(conn, batch.writer, len(graph.arrays), batch.quota)
        row = {
            "graph_id": graph.graph_id,
            "collection": graph.collection,
            "arrays": graph.arrays,
            "num_nodes": graph.num_nodes,
            "first_seen": graph.first_seen,
        }
        conn.execute(self._insert_ignore(graphs, "graph_id"), row)

    def generation(
        self, collection: str, target: str, graph_id: str
    ) -> tuple[int, int]:
        """(count, max id) of the measurements of a key: changes whenever rows are
        added; an index-only scan."""
        m = measurements.c
        query = select(func.count(), func.coalesce(func.max(m.id), 0)).where(
            m.collection == collection, m.target == target, m.graph_id == graph_id
        )
        with self._transaction("reading measurements") as conn:
            count, top = conn.execute(query).one()
        return int(count), int(top)

    def measurements(
        self,
        collection: str,
        target: str,
        graph_id: str,
        limit: int | None = None,
        writer: str | None = None,
    ) -> StoredRows:
        """The measurements of a key in id order; with ``limit``, the newest ``limit``
        of each writer (so one writer's flood cannot push the others' rows out);
        with ``writer``, that writer's only."""
        m = measurements.c
        columns = (
            m.id,
            m.config,
            m.config_dtype,
            m.config_shape,
            m.runtime_ns,
            m.score,
            m.writer,
            m.compiler,
        )
        where = [m.collection == collection, m.target == target, m.graph_id == graph_id]
        if writer is not None:
            where.append(m.writer == writer)
        query: Select[Any] = select(*columns).where(*where).order_by(m.id)
        if limit is not None:
            newest = func.row_number().over(partition_by=m.writer, order_by=m.id.desc())
            sub = select(*columns, newest.label("newest")).where(*where).subquery()
            query = select(*(sub.c[c.name] for c in columns))
            query = query.where(sub.c.newest <= max(0, limit)).order_by(sub.c.id)
        with self._transaction("reading measurements") as conn:
            rows = list(conn.execute(query).all())
        return measured(rows, collection)

    def target_generation(self, collection: str, target: str) -> tuple[int, int]:
        """(count, max id) of every measurement of a (collection, target): changes
        whenever one is added or purged; what target knowledge is tagged with."""
        m = measurements.c
        query = select(func.count(), func.coalesce(func.max(m.id), 0)).where(
            m.collection == collection, m.target == target
        )
        with self._transaction("reading measurements") as conn:
            count, top = conn.execute(query).one()
        return int(count), int(top)

    def target_measurements(
        self, collection: str, target: str, limit: int
    ) -> dict[str, StoredRows]:
        """The newest ``limit`` measurements of each writer on a (collection,
        target) (so one writer's flood cannot push the others' rows out), per graph
        (each graph's rows in id order); one query."""
        m = measurements.c
        columns = (
            m.id,
            m.graph_id,
            m.config,
            m.config_dtype,
            m.config_shape,
            m.runtime_ns,
            m.score,
            m.writer,
            m.compiler,
        )
        newest = func.row_number().over(partition_by=m.writer, order_by=m.id.desc())
        sub = (
            select(*columns, newest.label("newest"))
            .where(m.collection == collection, m.target == target)
            .subquery()
        )
        query = select(*(sub.c[c.name] for c in columns))
        query = query.where(sub.c.newest <= max(0, limit)).order_by(sub.c.id)
        with self._transaction("reading measurements") as conn:
            rows = list(conn.execute(query).all())
        by_graph: dict[str, list[Any]] = {}
        for r in rows:
            by_graph.setdefault(r.graph_id, []).append(r)
        return {gid: measured(group, collection) for gid, group in by_graph.items()}

    def keys(
        self,
        collection: str | None = None,
        target: str | None = None,
        writer: str | None = None,
    ) -> list[tuple[str, str, str]]:
        """Distinct (collection, target, graph_id) that have measurements, sorted."""
        m = measurements.c
        query = select(m.collection, m.target, m.graph_id).distinct()
        if collection is not None:
            query = query.where(m.collection == collection)
        if target is not None:
            query = query.where(m.target == target)
        if writer is not None:
            query = query.where(m.writer == writer)
        query = query.order_by(m.collection, m.target, m.graph_id)
        with self._transaction("listing measurements") as conn:
            return [(r[0], r[1], r[2]) for r in conn.execute(query)]

    def graph_summaries(self) -> list[GraphSummary]:
        """Per (model, collection, target, graph): measurements, fastest runtime,
        fastest of the default config (``summary.py``); one aggregate query."""
        with self._transaction("summarising measurements") as conn:
            return graph_summaries(conn)

    def prune(self, graph_age_s: int, key_age_s: int) -> tuple[int, int]:
        """Delete graphs nobody measured, first seen over ``graph_age_s`` ago, and
        idempotency keys older than ``key_age_s`` (0: keep); (graphs, keys) deleted."""
        now, pruned = datetime.now(UTC), [0, 0]
        unmeasured = ~exists().where(measurements.c.graph_id == graphs.c.graph_id)
        jobs = (
            (graph_age_s, delete(graphs), graphs.c.first_seen, unmeasured),
            (key_age_s, delete(feedback_keys), feedback_keys.c.created, None),
        )
        with self._transaction("pruning", write=True) as conn:
            for i, (age, query, seen, extra) in enumerate(jobs):
                if age > 0:
                    query = query.where(seen < now - timedelta(seconds=age))
                    if extra is not None:
                        query = query.where(extra)
                    pruned[i] = int(conn.execute(query).rowcount or 0)
        return pruned[0], pruned[1]

    @contextmanager
    def _transaction(self, action: str, *, write: bool = False) -> Iterator[Connection]:
        """A transaction on a pooled connection; database errors become StoreErrors.
        Writes on SQLite begin IMMEDIATE (take the write lock first)."""
        engine = self._writer if write else self._engine
        with translated(self._dialect, action), engine.begin() as conn:
            yield conn

    def _insert_ignore(self, table: Table, key: str) -> Insert:
        """INSERT ... ON CONFLICT (key) DO NOTHING RETURNING key: no row back when
        the key existed (rowcount is not reliable for an insert on every driver)."""
        dialect_insert = (
            postgresql.insert if self._dialect == "postgresql" else sqlite.insert
        )
        statement = dialect_insert(table).on_conflict_do_nothing(index_elements=[key])
        return statement.returning(table.c[key])


def _graph_exists(conn: Connection, graph_id: str) -> bool:
    query = select(graphs.c.graph_id).where(graphs.c.graph_id == graph_id)
    return conn.execute(query).first() is not None


def _replay(conn: Connection, batch: MeasurementBatch) -> AddResult | None:
    """The stored answer if the batch's key was seen (None if not); a different
    request under the same key is an ``IdempotencyKeyReused``."""
    assert batch.idempotency_key is not None
    key = scoped_key(batch.idempotency_key, batch.writer)
    try:
        seen = replayed(conn, key, batch.request_hash)
    except IdempotencyKeyReused:  # named as the client sent it, not as stored
        raise IdempotencyKeyReused(
            f"idempotency key {batch.idempotency_key!r} was used for a different "
            "request"
        ) from None
    if seen is None:
        return None
    return AddResult(stored=0, duplicate=True, response=seen.response)
