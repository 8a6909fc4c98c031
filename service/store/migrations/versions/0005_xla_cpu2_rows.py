"""xla_cpu rows become ``xla_cpu/2`` rows: the ``xla_cpu/1`` row and the threshold.

The xla_cpu collection's spec grew from ``xla_cpu/1`` (17 columns) to ``xla_cpu/2``
(20: the same 17, then the one-hot ``xla_cpu_small_while_loop_byte_threshold``,
``tpugraphs/xla_cpu2.py``). A ``xla_cpu/1`` row is the ``xla_cpu/2`` row with the
threshold at XLA's default, so every stored xla_cpu row of shape "17" (measurements'
``config``; decisions' ``config`` and ``refuted_config``, which share the decision's
dtype and shape) gets the default's bits [1, 0, 0] appended and shape "20". A row
keeps its ``config_dtype``: the smallest dtype its batch fitted when stored
(``core/feedback.compact``, int8 for 0/1 rows) holds 0 and 1 too, so the bytes are
the ones a new write of the same row stores. Decisions' ``compiler_options`` stay:
the default threshold adds no option.

Downgrade is the inverse for rows whose threshold is the default; ``xla_cpu/1``
cannot say the others, so those measurements and decisions are deleted and a
refutation of such a row is dropped (the decision stays), as 0004 deleted what the
older code could not serve.

The constants are frozen here (not imported): a migration must mean the same
whatever the code around it later says. Rows are rewritten in batches by id, so a
large table is never held in memory at once.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

COLLECTION = "xla_cpu"
V1_SHAPE, V2_SHAPE = "17", "20"
V1_WIDTH = 17
DEFAULT_THRESHOLD = (1, 0, 0)  # small_while_loop_{default, 65536, 1e9}
BATCH = 1000

Rewrite = Callable[[bytes, str], bytes | None]  # (blob, dtype) -> blob; None: drop

_measurements = sa.table(
    "measurements",
    sa.column("id", sa.BigInteger()),
    sa.column("collection", sa.String()),
    sa.column("config", sa.LargeBinary()),
    sa.column("config_dtype", sa.String()),
    sa.column("config_shape", sa.String()),
)
_decisions = sa.table(
    "decisions",
    sa.column("id", sa.BigInteger()),
    sa.column("collection", sa.String()),
    sa.column("config", sa.LargeBinary()),
    sa.column("config_dtype", sa.String()),
    sa.column("config_shape", sa.String()),
    sa.column("refuted_config", sa.LargeBinary()),
    sa.column("refuted_reason", sa.String()),
)


def upgrade() -> None:
    _rewrite(_measurements, V1_SHAPE, V2_SHAPE, _upgraded)
    _rewrite(_decisions, V1_SHAPE, V2_SHAPE, _upgraded)


def downgrade() -> None:
    _rewrite(_measurements, V2_SHAPE, V1_SHAPE, _downgraded)
    _rewrite(_decisions, V2_SHAPE, V1_SHAPE, _downgraded)


def _upgraded(blob: bytes, dtype: str) -> bytes:
    row = np.frombuffer(blob, np.dtype(dtype))
    tail = np.asarray(DEFAULT_THRESHOLD, np.dtype(dtype))
    return np.concatenate([row, tail]).tobytes()


def _downgraded(blob: bytes, dtype: str) -> bytes | None:
    row = np.frombuffer(blob, np.dtype(dtype))
    if not np.array_equal(row[V1_WIDTH:], DEFAULT_THRESHOLD):
        return None  # a threshold xla_cpu/1 cannot say
    return row[:V1_WIDTH].tobytes()


def _rewrite(table: sa.TableClause, old: str, new: str, rewrite: Rewrite) -> None:
    """Every xla_cpu row of ``table`` in shape ``old`` rewritten to shape ``new``;
    a row whose ``config`` does not survive is deleted, a ``refuted_config`` that
    does not is dropped with its reason."""
    conn = op.get_bind()
    refutes = "refuted_config" in table.c
    for rows in _batches(conn, table, old):
        updates, gone = [], []
        for r in rows:
            config = rewrite(bytes(r.config), r.config_dtype)
            if config is None:
                gone.append(r.id)
                continue
            # Parameters are named new_<column>: a bindparam may not take the name
            # of a column the statement sets.
            values: dict[str, Any] = {"row_id": r.id, "new_config": config}
            if refutes:
                refuted = r.refuted_config
                kept = (
                    None if refuted is None else rewrite(bytes(refuted), r.config_dtype)
                )
                values["new_refuted_config"] = kept
                values["new_refuted_reason"] = (
                    None if kept is None else r.refuted_reason
                )
            updates.append(values)
        if gone:
            conn.execute(table.delete().where(table.c.id.in_(gone)))
        if updates:
            columns: dict[str, Any] = {
                k[4:]: sa.bindparam(k) for k in updates[0] if k != "row_id"
            }
            statement = (
                table.update()
                .where(table.c.id == sa.bindparam("row_id"))
                .values(config_shape=new, **columns)
            )
            conn.execute(statement, updates)


def _batches(
    conn: sa.Connection, table: sa.TableClause, shape: str
) -> Iterator[list[Any]]:
    """The table's xla_cpu rows of ``shape``, ``BATCH`` at a time in id order (keyset:
    a rewritten row has another shape, a deleted one is gone, neither comes again)."""
    columns = [table.c.id, table.c.config, table.c.config_dtype]
    if "refuted_config" in table.c:
        columns += [table.c.refuted_config, table.c.refuted_reason]
    after = None
    while True:
        query = sa.select(*columns).where(
            table.c.collection == COLLECTION, table.c.config_shape == shape
        )
        if after is not None:
            query = query.where(table.c.id > after)
        rows = list(conn.execute(query.order_by(table.c.id).limit(BATCH)))
        if not rows:
            return
        yield rows
        after = rows[-1].id
