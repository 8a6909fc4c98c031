"""Writers: who may store measurements, and how much.

    WriterTable.create(name, targets) -> token   shown once; only its sha256 is kept
    WriterTable.authenticate(token) -> Writer | None   active writers only
    WriterTable.revoke(name), .list(), .purge(name) -> measurements deleted (its
                                                 decisions go too, and its token is
                                                 revoked; ANONYMOUS: the rows
                                                 stored without a token)
    WriterTable.precheck(name, rows, quota)      the quota, before any work
    lock(conn, writer)                           serialise one writer's transactions
    check_quota(conn, writer, rows, quota)       inside the storing transaction
                                                 (measurements and decisions)
    check_graph_bytes(conn, writer, size, quota) likewise, for an archived graph
    scoped_key(key, writer)                      an idempotency key, per writer

A token is ``cmw_`` + 32 random bytes (``secrets``), so it is looked up by its hash
alone: a table lookup by sha256 reveals nothing a timing attack could use, and a
database dump holds no usable token. Revoking keeps the row (its name stays on its
measurements); ``create`` may reuse a revoked name, with a new token, only once no
measurement carries it (purge them first): else the new holder would inherit the
old one's rows, its share in every fit and its quota.

Quotas count rows, then insert: under PostgreSQL's READ COMMITTED, concurrent
transactions of one writer would each count the others' rows as absent, so the
storing transaction first takes a transaction-scoped advisory lock on the writer's
name (``lock``). SQLite's writes are serialised already (BEGIN IMMEDIATE).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import struct
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    Table,
    delete,
    exists,
    func,
    or_,
    select,
    update,
)

from xla_costmodel.service.store.errors import StoreError
from xla_costmodel.service.store.records import Quota
from xla_costmodel.service.store.schema import decisions, graphs, measurements, writers

TOKEN_PREFIX = "cmw_"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# The rows stored without a token (``measurements.writer`` NULL), by the name purge
# and export take: reserved, so no token can be created under it.
ANONYMOUS = "anonymous"
Transaction = Callable[..., AbstractContextManager[Connection]]


class WriterExists(StoreError):
    """An active writer already has this name (revoke it first)."""


class WriterNameInUse(WriterExists):
    """A revoked writer's name still carried by measurements (purge them first)."""


class UnknownWriter(StoreError):
    """No writer of this name."""


class WriterQuotaExceeded(StoreError):
    """The writer stored its quota of rows in the window; ``retry_after_s`` says
    when enough of them leave it."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Writer:
    name: str
    targets: tuple[str, ...] | None  # None: any target
    created: datetime
    revoked: datetime | None = None

    def may_write(self, target: str) -> bool:
        return self.targets is None or target in self.targets


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


class WriterTable:
    """The ``writers`` table, through the store's transactions."""

    def __init__(self, transaction: Transaction) -> None:
        self._transaction = transaction

    def create(self, name: str, targets: Sequence[str] | None = None) -> str:
        """A new writer's token (the only time it exists outside the caller)."""
        if not NAME.match(name):
            raise ValueError(
                f"writer name {name!r}: 1 to 64 of A-Z a-z 0-9 . _ -, "
                "starting with a letter or digit"
            )
        if name.lower() == ANONYMOUS:
            raise ValueError(
                f"writer name {name!r} is reserved: it names the rows stored "
                "without a token"
            )
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        row = {
            "name": name,
            "token_hash": token_hash(token),
            "targets": json.dumps(sorted(set(targets))) if targets else None,
            "created": datetime.now(UTC),
            "revoked": None,
        }
        with self._transaction("creating a writer", write=True) as conn:
            found = conn.execute(
                select(writers.c.revoked).where(writers.c.name == name)
            ).first()
            if found is not None and found.revoked is None:
                raise WriterExists(f"writer {name!r} exists (revoke it first)")
            if found is not None:
                _refuse_if_measured(conn, name)
                conn.execute(delete(writers).where(writers.c.name == name))
            conn.execute(writers.insert(), row)
        return token

    def authenticate(self, token: str) -> Writer | None:
        """The active writer holding ``token``, or None."""
        query = select(writers).where(
            writers.c.token_hash == token_hash(token), writers.c.revoked.is_(None)
        )
        with self._transaction("checking a token") as conn:
            row = conn.execute(query).first()
        return None if row is None else _writer(row)

    def list(self) -> list[Writer]:
        with self._transaction("listing writers") as conn:
            rows = conn.execute(select(writers).order_by(writers.c.name)).all()
        return [_writer(r) for r in rows]

    def revoke(self, name: str) -> None:
        """Its token stops working at once (every replica asks the database)."""
        query = (
            update(writers)
            .where(writers.c.name == name, writers.c.revoked.is_(None))
            .values(revoked=datetime.now(UTC))
            .returning(writers.c.name)
        )
        with self._transaction("revoking a writer", write=True) as conn:
            if conn.execute(query).first() is None:
                raise UnknownWriter(f"no active writer {name!r}")

    def precheck(self, name: str, rows: int, quota: Quota) -> None:
        """``WriterQuotaExceeded`` if ``rows`` more would pass the quota now: one
        indexed count, before a request pays for featurizing and scoring (the
        storing transaction checks again, exactly)."""
        with self._transaction("checking a quota") as conn:
            check_quota(conn, name, rows, quota)

    def purge(self, name: str) -> int:
        """Delete every measurement and decision the writer stored (``ANONYMOUS``:
        those stored without a token) and revoke its token; the measurements
        deleted. Each graph's measurement generation changes, so every replica
        refits. Its decisions go in the same transaction: kept, ``GET /v1/best``
        would go on serving what a writer the operator removed decided (a revoked
        one's are only hidden). The token goes too: purged but active, the writer
        would store again at once (its name may then be given to a new token:
        nothing carries it any more)."""
        with self._transaction("purging a writer's rows", write=True) as conn:
            conn.execute(
                update(writers)
                .where(writers.c.name == name, writers.c.revoked.is_(None))
                .values(revoked=datetime.now(UTC))
            )
            conn.execute(delete(decisions).where(_stored_by(decisions, name)))
            deleted = conn.execute(
                delete(measurements).where(_stored_by(measurements, name))
            )
            return int(deleted.rowcount or 0)


def _stored_by(table: Table, name: str) -> ColumnElement[bool]:
    """The rows of ``table`` (measurements, decisions) that writer ``name`` stored."""
    which = table.c.writer == name
    if name == ANONYMOUS:  # and any row of a writer so named before it was
        which = or_(table.c.writer.is_(None), which)
    return which


def check_quota(conn: Connection, writer: str, rows: int, quota: Quota) -> None:
    """``WriterQuotaExceeded`` if storing ``rows`` more would pass the writer's quota
    (none when ``quota.rows`` is 0). A decision is a row of the quota too, beside
    the measurements it stores: else decisions would bypass it."""
    if not quota.rows:
        return
    now = datetime.now(UTC)
    since = now - timedelta(seconds=quota.window_s)
    m, d = measurements.c, decisions.c
    counts = [
        conn.execute(query).one()
        for query in (
            select(func.count(), func.min(m.time)).where(
                m.writer == writer, m.time >= since
            ),
            select(func.count(), func.min(d.decided_at)).where(
                d.writer == writer, d.decided_at >= since
            ),
        )
    ]
    count = sum(int(n) for n, _ in counts)
    if count + rows <= quota.rows:
        return
    oldest = min((t for _, t in counts if t is not None), default=None)
    wait = quota.window_s if oldest is None else (oldest - since).total_seconds()
    raise WriterQuotaExceeded(
        f"writer {writer!r} stored {count} measurements and decisions in the last "
        f"{quota.window_s} s; {rows} more would pass its quota of {quota.rows}",
        max(1, int(wait) + 1),
    )


def lock(conn: Connection, writer: str) -> None:
    """Serialise the writer's storing transactions on PostgreSQL (released at
    commit or rollback); a no-op on SQLite, whose writes are serialised already."""
    if conn.dialect.name != "postgresql":
        return
    digest = hashlib.sha256(b"costmodel-writer\0" + writer.encode()).digest()
    (key,) = struct.unpack(">q", digest[:8])  # advisory locks take a bigint
    conn.execute(select(func.pg_advisory_xact_lock(key))).one()


def check_graph_bytes(conn: Connection, writer: str, size: int, quota: Quota) -> None:
    """``WriterQuotaExceeded`` if archiving ``size`` more bytes of graphs would pass
    the writer's cap: the graphs first seen in the window that it measured there
    (a graph is archived only with its first measurements, so these are what it
    archived, and what others archived that it measured too: never less)."""
    if not quota.graph_bytes:
        return
    since = datetime.now(UTC) - timedelta(seconds=quota.window_s)
    g, m = graphs.c, measurements.c
    measured = exists().where(
        m.graph_id == g.graph_id, m.writer == writer, m.time >= since
    )
    query = select(func.coalesce(func.sum(func.length(g.arrays)), 0)).where(
        g.first_seen >= since, measured
    )
    archived = int(conn.execute(query).scalar_one())
    if archived + size <= quota.graph_bytes:
        return
    raise WriterQuotaExceeded(
        f"writer {writer!r} archived {archived} bytes of graphs in the last "
        f"{quota.window_s} s; this one ({size} bytes) would pass its cap of "
        f"{quota.graph_bytes} (QUOTA_GRAPH_BYTES in service/core/build.py)",
        quota.window_s,
    )


def scoped_key(key: str, writer: str | None) -> str:
    """An idempotency key as stored: per writer, so one writer's key never
    replays (or blocks) another's. Within 200 characters; the space keeps it
    apart from every key a client can send (printable, no spaces)."""
    if writer is None:
        return key
    return f"{writer} {hashlib.sha256(key.encode()).hexdigest()}"


def _refuse_if_measured(conn: Connection, name: str) -> None:
    """A revoked name is free again only once nothing it stored remains: its
    decisions, hidden while it is revoked, would be served again under a new token."""
    carried = []
    for table, what in ((measurements, "measurements"), (decisions, "decisions")):
        rows = conn.execute(
            select(func.count()).where(table.c.writer == name)
        ).scalar_one()
        if rows:
            carried.append(f"{rows} {what}")
    if carried:
        raise WriterNameInUse(
            f"writer {name!r} was revoked, but {' and '.join(carried)} still carry "
            "its name: a new writer of that name would inherit them (their share in "
            "every fit and answer, and the quota). Purge them first (costmodel "
            f"measurements purge --writer {name}) or choose another name"
        )


def _writer(row: Row[Any]) -> Writer:
    targets = None if row.targets is None else tuple(json.loads(row.targets))
    return Writer(row.name, targets, row.created, row.revoked)
