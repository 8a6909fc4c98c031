"""Schema migrations (alembic), run when a store opens.

Several replicas may open a fresh database at once. The upgrade runs in one
transaction; on PostgreSQL that transaction first takes an advisory lock, so replicas
migrate one after another and the later ones find the schema at head. On SQLite the
transaction begins with ``BEGIN IMMEDIATE``, which serialises the same way.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, text

from xla_costmodel.service.store.engine import WRITE
from xla_costmodel.service.store.errors import StoreUnavailable

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# pg_advisory_xact_lock key (a signed bigint), the same in every replica.
ADVISORY_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"xla_costmodel.store.migrate").digest()[:8], "big", signed=True
)


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: Engine) -> None:
    """Bring the database to the newest schema (a no-op when it is there already)."""
    head = head_revision()
    with engine.connect() as connection:
        current = current_revision(connection)
        connection.rollback()
    if current == head:
        return
    with engine.execution_options(**{WRITE: True}).begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY}
            )
        try:
            command.upgrade(alembic_config(connection), "head")
        except CommandError as exc:  # the database is at a revision we do not know
            raise _newer_schema(current_revision(connection), head) from exc


def check_current(engine: Engine) -> None:
    """Without migrating: refuse a database whose schema is not this code's head."""
    head = head_revision()
    with engine.connect() as connection:
        current = current_revision(connection)
    if current is None:
        raise StoreUnavailable(
            "database has no costmodel schema yet (open it with migrations on)"
        )
    if current != head:
        known = {
            s.revision
            for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()
        }
        if current not in known:
            raise _newer_schema(current, head)
        raise StoreUnavailable(
            f"database schema is at revision {current}, this code needs {head} "
            "(open it with migrations on)"
        )


def _newer_schema(current: str | None, head: str) -> StoreUnavailable:
    return StoreUnavailable(
        f"database schema is at revision {current}, unknown to this code (head "
        f"{head}): a newer costmodel migrated it; upgrade this one"
    )
