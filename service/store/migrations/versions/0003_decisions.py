"""Tuning decisions, and the compiler each measurement was taken under.

``measurements.compiler`` names the compiler build a runtime was measured with
(NULL: unknown, as for every row stored before this revision). ``decisions`` holds
what a tuner kept for a program: the config row (raw little-endian bytes, as
``measurements.config``), the compiler options it stands for (JSON), the speedup
over the default with its confidence bounds, and who decided it. Its index serves
``GET /v1/best``: every decision of one graph on one target, found by graph id or by
the fingerprint of the program's lowered module.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # Nullable: a plain ALTER on both databases, and old rows mean "unknown".
    op.add_column("measurements", sa.Column("compiler", sa.String(128), nullable=True))
    op.create_table(
        "decisions",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("model_version", sa.String(64), nullable=False),
        sa.Column("collection", sa.String(64), nullable=False),
        sa.Column("target", sa.String(128), nullable=False),
        sa.Column("compiler", sa.String(128), nullable=True),
        sa.Column("graph_id", sa.String(64), nullable=False),
        sa.Column("hlo_fingerprint", sa.String(64), nullable=True),
        sa.Column("config", sa.LargeBinary(), nullable=False),
        sa.Column("config_dtype", sa.String(8), nullable=False),
        sa.Column("config_shape", sa.String(64), nullable=False),
        sa.Column("compiler_options", sa.Text(), nullable=False),
        sa.Column("speedup", sa.Float(), nullable=False),
        sa.Column("speedup_low", sa.Float(), nullable=False),
        sa.Column("speedup_high", sa.Float(), nullable=True),
        sa.Column("p_value", sa.Float(), nullable=True),
        sa.Column("pairs", sa.Integer(), nullable=False),
        sa.Column("budget", sa.Integer(), nullable=False),
        sa.Column("strategy", sa.String(16), nullable=False),
        sa.Column("kept_default", sa.Boolean(), nullable=False),
        sa.Column("writer", sa.String(64), nullable=True),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_decisions"),
        sa.CheckConstraint(
            "speedup_low > 0 AND speedup_low <= speedup", name="ck_decisions_speedup"
        ),
        sa.CheckConstraint("pairs >= 0 AND budget >= 0", name="ck_decisions_counts"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_decisions_target_graph_id", "decisions", ["target", "graph_id"])
    op.create_index(
        "ix_decisions_target_hlo_fingerprint",
        "decisions",
        ["target", "hlo_fingerprint"],
    )


def downgrade() -> None:
    op.drop_index("ix_decisions_target_hlo_fingerprint", table_name="decisions")
    op.drop_index("ix_decisions_target_graph_id", table_name="decisions")
    op.drop_table("decisions")
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("compiler")
