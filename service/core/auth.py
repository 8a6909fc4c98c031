"""Who writes measurements: a feedback request's bearer token -> its writer.

    FeedbackAuth.writer(Caller(authorization, port, host)) -> Writer | None

Writers live in the measurement database (``costmodel tokens create``), so every
worker and replica knows the same ones and a revoked token stops working everywhere
on its next request: each feedback request looks its token's hash up (one indexed
query; feedback writes to the database anyway). With tokens not required, a request
without one is anonymous (its rows have no writer); a token that is sent is always
checked, so a misconfigured client hears about it instead of writing anonymously;
and so is an ``Authorization`` header that is not a well-formed ``Bearer <token>``
(``Token x``, ``Basic ...``: 401, never anonymous).

Whether tokens are required (``COSTMODEL_FEEDBACK_AUTH``): ``token``, ``off``, or
``auto``: not where the server listens on loopback only, judged by the sockets this
process actually listens on for the request's port (``core/binding.py``), never the
configured host; where that cannot be known, tokens are required. A reverse proxy on
the same host makes every client local: behind one, set ``token``.

Anonymous feedback to a server listening on loopback only must name it as
``localhost``, ``127.0.0.1`` or ``[::1]`` (its ``Host``): a web page that rebinds its
own DNS name to 127.0.0.1 makes the victim's browser send requests whose ``Host`` is
that name (DNS rebinding), and those are refused (403).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Literal, Protocol

import anyio.to_thread

from xla_costmodel.service.core.binding import listening, loopback_only
from xla_costmodel.service.core.database import Database
from xla_costmodel.service.core.errors import (
    FeedbackUnavailable,
    Forbidden,
    Unauthorized,
)
from xla_costmodel.service.store import StoreError, Writer

log = logging.getLogger(__name__)
FIELD = "Authorization"
Mode = Literal["auto", "token", "off"]
# RFC 6750's b64token; the scheme is case-insensitive (RFC 9110).
_BEARER = re.compile(r"^[Bb][Ee][Aa][Rr][Ee][Rr] +([A-Za-z0-9._~+/-]+=*) *$")
# What a browser sends for a loopback server it was pointed at by address.
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})


@dataclass(frozen=True)
class Caller:
    """What a feedback request says about itself."""

    authorization: str | None  # the header, as sent
    port: int | None  # the server port it reached (the ASGI scope's "server")
    host: str | None  # its Host header


def bearer_token(authorization: str | None) -> str | None:
    """The token of ``Bearer <token>``; None for no header; else 401."""
    if authorization is None:
        return None
    found = _BEARER.match(authorization)
    if found is None:
        raise Unauthorized(
            "Authorization must be `Bearer <token>` (a writer's token)", FIELD
        )
    return found.group(1)


def local_host(host: str | None) -> bool:
    """Whether a Host header names this machine by a loopback name."""
    if host is None:
        return False
    name = host.lower()
    if not name.startswith("["):
        name = name.rsplit(":", 1)[0]
    elif "]" in name:
        name = name[: name.index("]") + 1]
    return name in LOCAL_HOSTS


class AuthEvents(Protocol):
    def store_error(self, op: str) -> None: ...


class FeedbackAuth:
    def __init__(self, db: Database, mode: Mode, events: AuthEvents) -> None:
        self.db = db
        self.mode = mode
        self.events = events
        self._loopback: dict[int, bool] = {}  # port -> listening on loopback only

    async def writer(self, caller: Caller) -> Writer | None:
        """The writer holding the caller's token; None for no token where none is
        required."""
        token = bearer_token(caller.authorization)
        if token is None:
            await self._anonymous(caller)
            return None
        try:
            found = await self.db.run(
                lambda s: s.writers.authenticate(token), writers=True
            )
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

    async def anonymous_open(self, port: int | None) -> bool:
        """Whether a request without a token may write through ``port`` (the
        ``Host`` check aside): what anonymous decisions are served by
        (``core/best.py``), so that once tokens are required, the rows stored
        without one stop deciding anything."""
        if self.mode == "off":
            return True
        return self.mode == "auto" and await self.loopback_only(port)

    async def _anonymous(self, caller: Caller) -> None:
        """Raise unless anonymous feedback is open to this caller."""
        local = self.mode != "token" and await self.loopback_only(caller.port)
        if self.mode == "token" or (self.mode == "auto" and not local):
            raise Unauthorized(
                "feedback needs a writer token: send Authorization: Bearer "
                "<token> (an operator creates one with `costmodel tokens create`)",
                FIELD,
            )
        if local and not local_host(caller.host):
            raise Forbidden(
                "anonymous feedback to a server listening on loopback only must "
                "be sent to localhost, 127.0.0.1 or [::1] (Host header)",
                "Host",
            )

    async def loopback_only(self, port: int | None) -> bool:
        """Whether this process listens on ``port`` on loopback addresses only
        (False when that cannot be known); asked once per port."""
        if port is None:
            return False
        if port not in self._loopback:
            addresses = await anyio.to_thread.run_sync(listening, port)
            self._loopback[port] = loopback_only(addresses)
            log.info(
                "feedback auth decided from the listening sockets",
                extra={"port": port, "addresses": addresses, "mode": self.mode},
            )
        return self._loopback[port]
