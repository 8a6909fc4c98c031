"""Initial schema: graphs, measurements, feedback_keys.

Revision ID: 0001
Revises:
Create Date: 2026-05-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "graphs",
        sa.Column("graph_id", sa.String(64), nullable=False),
        sa.Column("collection", sa.String(64), nullable=False),
        sa.Column("arrays", sa.LargeBinary(), nullable=False),
        sa.Column("num_nodes", sa.Integer(), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("graph_id", name="pk_graphs"),
    )
    op.create_table(
        "measurements",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("model_version", sa.String(64), nullable=False),
        sa.Column("collection", sa.String(64), nullable=False),
        sa.Column("target", sa.String(128), nullable=False),
        sa.Column("graph_id", sa.String(64), nullable=False),
        sa.Column("config", sa.LargeBinary(), nullable=False),
        sa.Column("config_dtype", sa.String(8), nullable=False),
        sa.Column("config_shape", sa.String(64), nullable=False),
        sa.Column("runtime_ns", sa.BigInteger(), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_measurements"),
        sa.ForeignKeyConstraint(
            ["graph_id"],
            ["graphs.graph_id"],
            name="fk_measurements_graph_id_graphs",
        ),
        sa.CheckConstraint(
            "source IN ('feedback', 'import')", name="ck_measurements_source"
        ),
        sa.CheckConstraint("runtime_ns > 0", name="ck_measurements_runtime_positive"),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_measurements_key",
        "measurements",
        ["collection", "target", "graph_id", "id"],
    )
    op.create_table(
        "feedback_keys",
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_feedback_keys"),
    )


def downgrade() -> None:
    op.drop_table("feedback_keys")
    op.drop_index("ix_measurements_key", table_name="measurements")
    op.drop_table("measurements")
    op.drop_table("graphs")
