"""Writers (who may store measurements) and each measurement's writer.

``writers`` holds a name, the sha256 of its bearer token (never the token), the
targets it may write (JSON list; NULL = any), when it was created and revoked.
``measurements.writer`` names the writer that stored a row (NULL: stored without
feedback auth, or imported); its index serves ``purge``, quotas and per-writer fits.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "writers",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("targets", sa.Text(), nullable=True),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_writers"),
        sa.UniqueConstraint("token_hash", name="uq_writers_token_hash"),
    )
    # No foreign key to writers: a purged writer's name may be reused, and SQLite
    # could add one only by copying the table. A nullable column is a plain ALTER.
    op.add_column("measurements", sa.Column("writer", sa.String(64), nullable=True))
    op.create_index("ix_measurements_writer", "measurements", ["writer", "time"])


def downgrade() -> None:
    op.drop_index("ix_measurements_writer", table_name="measurements")
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("writer")
    op.drop_table("writers")
