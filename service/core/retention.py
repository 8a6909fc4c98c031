"""Retention: graphs nobody measured and old idempotency keys leave the database.

    Retention.sweep() -> (graphs, keys) deleted      one transaction
    Retention.sweeper(period_s) -> Periodic | None   the same on a timer

Every rank of a new graph archives it (so feedback can reach any replica later), and
every keyed feedback request leaves its key: without a bound both grow forever. A
graph with a measurement is kept for good (it is training data); one without any is
deleted ``graph_retention_s`` after it was first seen (0: never), and a key
``idempotency_retention_s`` after it was stored (a resend after that is stored
again). Every process sweeps on its own timer: the deletes are idempotent, so
replicas sweeping at once only repeat each other. A failed sweep is logged and
counted, and tried again next period.
"""

from __future__ import annotations

import logging
from typing import Protocol

from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.periodic import Periodic
from xla_costmodel.service.store import StoreError

log = logging.getLogger(__name__)


class RetentionEvents(Protocol):
    def store_error(self, op: str) -> None: ...


class Retention:
    def __init__(
        self, db: Database, graph_age_s: int, key_age_s: int, events: RetentionEvents
    ) -> None:
        self.db = db
        self.graph_age_s = graph_age_s
        self.key_age_s = key_age_s
        self.events = events

    async def sweep(self) -> tuple[int, int]:
        """Delete what is past retention now; (graphs, keys) deleted."""
        if not (self.graph_age_s or self.key_age_s):
            return 0, 0
        graphs, keys = await self.db.run(
            lambda s: s.prune(self.graph_age_s, self.key_age_s)
        )
        if graphs or keys:
            log.info("retention", extra={"graphs": graphs, "idempotency_keys": keys})
        return graphs, keys

    async def _sweep_counted(self) -> None:
        try:
            await self.sweep()
        except StoreError as exc:
            self.events.store_error("retention")
            log.warning("retention sweep failed", extra={"error": str(exc)})

    def sweeper(self, period_s: float) -> Periodic | None:
        """``sweep`` every ``period_s``, the first a period after the start; None
        when nothing is ever past retention."""
        if not (self.graph_age_s or self.key_age_s):
            return None
        return Periodic("retention", period_s, self._sweep_counted)
