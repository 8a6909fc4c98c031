"""Where feedback's measurements are written: the database of record, on the slots
reserved for writers.

    await FeedbackStore.precheck(writer, rows)   429 before any work if ``rows`` more
                                                 would pass the writer's quota
    await FeedbackStore.prepared(batch) -> batch     with the writer's quota, and the
                                                 graph to archive if the database lacks it
    await FeedbackStore.add(batch) -> AddResult  one transaction; then every process
                                                 hears the graph was written

``add`` turns what the store raises into the core's errors: an unknown graph is 404
(``graph_not_found``: send it inline), a reused key 422, a quota 429, and anything
that keeps the batch from the database 503 ``feedback_unavailable`` (nothing stored,
so the client may resend it). It returns only once the transaction is committed.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Protocol

from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.errors import (
    FeedbackUnavailable,
    GraphNotFound,
    IdempotencyConflict,
    QuotaExceeded,
)
from xla_costmodel.service.core.event_bus import EventBus
from xla_costmodel.service.core.events import MeasurementsWritten
from xla_costmodel.service.core.graph_archive import GraphArchive
from xla_costmodel.service.store import (
    AddResult,
    IdempotencyKeyReused,
    MeasurementBatch,
    Quota,
    StoreUnavailable,
    UnknownGraph,
    Writer,
    WriterQuotaExceeded,
)

log = logging.getLogger(__name__)


class StoreErrors(Protocol):
    """What the store reports (``FeedbackEvents`` includes it)."""

    def store_error(self, op: str) -> None: ...


class FeedbackStore:
    """``db`` stores (writers' slots), ``archive`` knows which graphs it holds,
    ``bus`` tells every process's caches (this one's at once) before the
    answer goes; ``quota`` is per writer (anonymous feedback, auth off, has none)."""

    def __init__(
        self,
        db: Database,
        archive: GraphArchive,
        bus: EventBus,
        events: StoreErrors,
        quota: Quota | None = None,
    ) -> None:
        self.db = db
        self.archive = archive
        self.bus = bus
        self.events = events
        self.quota = quota

    async def precheck(self, writer: Writer | None, rows: int) -> None:
        """429 before any work if ``rows`` more would pass the writer's quota: a
        cheap count (the storing transaction counts again)."""
        quota = self.quota
        if writer is None or quota is None:
            return
        try:
            await self.db.run(
                lambda s: s.writers.precheck(writer.name, rows, quota), writers=True
            )
        except WriterQuotaExceeded as exc:
            raise QuotaExceeded(str(exc), exc.retry_after_s) from None
        except StoreUnavailable:
            pass  # storing says so, with the answer it owes

    async def prepared(self, batch: MeasurementBatch) -> MeasurementBatch:
        """The batch with its writer's quota, and its graph as a row to archive in
        the same transaction (None when the database holds it already)."""
        return replace(
            batch,
            quota=None if batch.writer is None else self.quota,
            graph=await self.archive.pending(batch.graph_id, batch.collection),
        )

    async def add(self, batch: MeasurementBatch) -> AddResult:
        """Store the batch (once per idempotency key); on commit, note its graph
        archived and tell every process's caches."""
        try:
            added = await self.db.run(lambda s: s.add_measurements(batch), writers=True)
        except UnknownGraph:
            self.archive.forget(batch.graph_id)
            raise GraphNotFound(
                f"graph {batch.graph_id} is neither in the measurement database nor "
                "held here (graphs ranked or uploaded are held best-effort until "
                "feedback archives them): send the graph inline with the feedback "
                "(graph or hlo)",
                "graph_id",
            ) from None
        except IdempotencyKeyReused as exc:
            raise IdempotencyConflict(str(exc), "Idempotency-Key") from None
        except WriterQuotaExceeded as exc:
            raise QuotaExceeded(str(exc), exc.retry_after_s) from None
        except StoreUnavailable as exc:
            # The client hears what happened, not the driver's message (it may name
            # hosts, users, databases); the log keeps it for the operator.
            self.events.store_error("add_measurements")
            log.warning("feedback not stored", extra={"error": str(exc)})
            raise FeedbackUnavailable(
                "feedback not stored: the measurement database is unavailable; "
                "retry later"
            ) from None
        self.archive.stored(batch.graph_id)
        # Committed, not yet acknowledged: every process's subscribers hear of it
        # (this one's at once: its generations, its knowledge refresher).
        written = MeasurementsWritten(batch.collection, batch.target, batch.graph_id)
        await self.bus.publish(written)
        return added
