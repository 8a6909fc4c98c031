"""The tables, as SQLAlchemy Core objects the queries are built from.

The DDL itself lives in the migrations (``migrations/versions``); a test checks that
the migrated database and these definitions agree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
)

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend (SQLite stores naive text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if not isinstance(value, datetime) or value.tzinfo is None:
            raise ValueError("timestamps must be timezone-aware datetimes")
        utc = value.astimezone(UTC)
        return utc.replace(tzinfo=None) if dialect.name == "sqlite" else utc

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


# SQLite autoincrements only an INTEGER PRIMARY KEY (an alias of its rowid).
BigId = BigInteger().with_variant(Integer(), "sqlite")

graphs = Table(
    "graphs",
    metadata,
    Column("graph_id", String(64), primary_key=True),
    Column("collection", String(64), nullable=False),
    Column("arrays", LargeBinary, nullable=False),  # np.savez_compressed bytes
    Column("num_nodes", Integer, nullable=False),
    Column("first_seen", UTCDateTime, nullable=False),
)

measurements = Table(
    "measurements",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("time", UTCDateTime, nullable=False),
    Column("model", String(128), nullable=False),
    Column("model_version", String(64), nullable=False),
    Column("collection", String(64), nullable=False),
    Column("target", String(128), nullable=False),
    Column("graph_id", String(64), ForeignKey("graphs.graph_id"), nullable=False),
    Column("config", LargeBinary, nullable=False),  # raw little-endian bytes
    Column("config_dtype", String(8), nullable=False),  # "<f4", "|i1", ...
    Column("config_shape", String(64), nullable=False),  # "24", "62,18"
    Column("runtime_ns", BigInteger, nullable=False),
    Column("score", Float, nullable=True),
    Column("request_id", String(128), nullable=True),
    Column("source", String(16), nullable=False),
    Column("writer", String(64), nullable=True),  # writers.name; NULL: no auth
    Column("compiler", String(128), nullable=True),  # NULL: unknown
    CheckConstraint("source IN ('feedback', 'import')", name="source"),
    CheckConstraint("runtime_ns > 0", name="runtime_positive"),
    Index("ix_measurements_key", "collection", "target", "graph_id", "id"),
    Index("ix_measurements_writer", "writer", "time"),
    sqlite_autoincrement=True,  # ids never reused: id order is insertion order
)

writers = Table(
    "writers",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("token_hash", String(64), nullable=False, unique=True),  # sha256 hex
    Column("targets", Text, nullable=True),  # JSON list; NULL: any target
    Column("created", UTCDateTime, nullable=False),
    Column("revoked", UTCDateTime, nullable=True),
)

feedback_keys = Table(
    "feedback_keys",
    metadata,
    Column("key", String(200), primary_key=True),
    Column("request_hash", String(64), nullable=False),
    Column("response", Text, nullable=True),  # JSON
    Column("created", UTCDateTime, nullable=False),
)

# What a tuner kept for a program (``decisions.py``); GET /v1/best reads it by graph.
decisions = Table(
    "decisions",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("decided_at", UTCDateTime, nullable=False),
    Column("model", String(128), nullable=False),
    Column("model_version", String(64), nullable=False),
    Column("collection", String(64), nullable=False),
    Column("target", String(128), nullable=False),
    Column("compiler", String(128), nullable=True),  # NULL: unknown
    # No foreign key: a decision may name a graph only ever ranked by id.
    Column("graph_id", String(64), nullable=False),
    # sha256 of the program's lowered module (clients.xla.reuse.fingerprint): how
    # ``jit`` finds the decision without featurizing the program. NULL: not sent.
    Column("hlo_fingerprint", String(64), nullable=True),
    Column("config", LargeBinary, nullable=False),  # as measurements.config
    Column("config_dtype", String(8), nullable=False),
    Column("config_shape", String(64), nullable=False),
    Column("compiler_options", Text, nullable=False),  # JSON object
    Column("speedup", Float, nullable=False),
    Column("speedup_low", Float, nullable=False),
    Column("speedup_high", Float, nullable=True),
    Column("p_value", Float, nullable=True),
    Column("pairs", Integer, nullable=False),
    Column("budget", Integer, nullable=False),
    Column("strategy", String(16), nullable=False),
    Column("kept_default", Boolean, nullable=False),
    Column("writer", String(64), nullable=True),  # writers.name; NULL: no auth
    Column("request_id", String(128), nullable=True),
    # The fleet's answer this writer compiled and found "slower" than the default
    # or its outputs different ("outputs"): counted against that row. The bytes are
    # in the decision's config_dtype and config_shape. NULL: refutes nothing.
    Column("refuted_config", LargeBinary, nullable=True),
    Column("refuted_reason", String(16), nullable=True),
    CheckConstraint("speedup_low > 0 AND speedup_low <= speedup", name="speedup"),
    CheckConstraint("pairs >= 0 AND budget >= 0", name="counts"),
    Index("ix_decisions_target_graph_id", "target", "graph_id"),
    Index("ix_decisions_target_hlo_fingerprint", "target", "hlo_fingerprint"),
    Index("ix_decisions_writer", "writer", "decided_at"),  # quotas, replacement
    sqlite_autoincrement=True,
)
