"""Who writes measurements: a feedback request's bearer token -> its writer.

    FeedbackAuth.writer(token) -> Writer | None

Writers live in the measurement database (``costmodel tokens create``), so every
worker and replica knows the same ones and a revoked token stops working everywhere
on its next request: each feedback request looks its token's hash up (one indexed
query; feedback writes to the database anyway). With tokens not required, a request
without one is anonymous (its rows have no writer); a token that is sent is always
checked, so a misconfigured client hears about it instead of writing anonymously.
"""

from __future__ import annotations

import logging
from typing import Protocol

from xla_costmodel.service.core.database import Database
from xla_costmodel.service.errors import FeedbackUnavailable, Unauthorized
from xla_costmodel.service.store import StoreError, Writer

log = logging.getLogger(__name__)
FIELD = "Authorization"


class AuthEvents(Protocol):
    def store_error(self, op: str) -> None: ...


class FeedbackAuth:
    def __init__(self, db: Database, required: bool, events: AuthEvents) -> None:
        self.db = db
        self.required = required
        self.events = events

    async def writer(self, token: str | None) -> Writer | None:
        """The writer holding ``token``; None for no token where none is required."""
        if token is None:
            if self.required:
                raise Unauthorized(
                    "feedback needs a writer token: send Authorization: Bearer "
                    "<token> (an operator creates one with `costmodel tokens create`)",
                    FIELD,
                )
            return None
        try:
            found = await self.db.run(lambda s: s.writers.authenticate(token))
        except StoreError as exc:
            self.events.store_error("authenticate")
            log.warning("writer token not checked", extra={"error": str(exc)})
            raise FeedbackUnavailable(
                "feedback not stored: the measurement database is unavailable "
                "(the writer token could not be checked); retry later"
            ) from None
        if found is None:
            raise Unauthorized("unknown or revoked writer token", FIELD)
        return found
