"""Decisions that refute another row, and the index a writer's quota counts by.

A decision may carry the fleet's answer its writer compiled and found wrong
(``refuted_config``: the row's bytes, in the decision's own ``config_dtype`` and
``config_shape``; ``refuted_reason``: ``slower`` or ``outputs``); ``GET /v1/best``
counts it against that row. Decisions now count against the writer's quota, as its
measurements do: ``ix_decisions_writer`` serves that count and the replacement of a
writer's older decision of the same program.

Decisions of a row other than the default stored before this revision are deleted:
they were claims (options and speedups as sent, no measurements behind them), which
``GET /v1/best`` no longer serves; tuners store them again, measured, when they next
tune. Kept defaults stay (they stand for XLA's own options).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # Nullable: a plain ALTER on both databases; old decisions refute nothing.
    op.add_column(
        "decisions", sa.Column("refuted_config", sa.LargeBinary(), nullable=True)
    )
    op.add_column(
        "decisions", sa.Column("refuted_reason", sa.String(16), nullable=True)
    )
    op.create_index("ix_decisions_writer", "decisions", ["writer", "decided_at"])
    table = sa.table("decisions", sa.column("kept_default", sa.Boolean()))
    op.execute(table.delete().where(table.c.kept_default == sa.false()))


def downgrade() -> None:
    op.drop_index("ix_decisions_writer", table_name="decisions")
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("refuted_reason")
        batch.drop_column("refuted_config")
