"""Alembic environment for the measurement store.

Migrations run only through ``xla_costmodel.service.store.migrate``, which passes an open connection
(already inside the transaction that holds the migration lock) in
``config.attributes["connection"]``; there is no ini file and no offline mode.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection


def run_migrations() -> None:
    connection = context.config.attributes.get("connection")
    if context.is_offline_mode() or not isinstance(connection, Connection):
        raise RuntimeError(
            "costmodel migrations run through xla_costmodel.service.store.migrate.upgrade "
            "with an open connection"
        )
    context.configure(connection=connection, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
