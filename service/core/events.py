"""Invalidation events: what a committed write changed, and how they travel.

    MeasurementsWritten(collection, target, graph_id)    feedback; a decision's pairs
    DecisionsWritten(collection, target, graph_id)       any decision stored
    WritersChanged()                                     a writer revoked or purged
    Missed()                                             events may have been lost
    Subscriber = (event, source) -> None                 what ``event_bus`` calls

``event_bus.EventBus`` delivers them to the subscribers ``build_core`` wires: the
measurement generations (``generations.py``), the decision cache and the knowledge
refresher. Each subscriber acts on the events that concern it and ignores the rest:
a decision without pairs drops no measurement generation and wakes no refit.

On the wire (``CHANNEL``, sealed by the bus) one publish is one message, the JSON
``[origin, seq, sent_ms, [[kind, *fields], ...]]``; ``Missed`` is never sent. All
processes of a deployment run one version; an older process's message (another
shape) reads as unreadable, which its hearers treat as ``Missed``, and the other
way round, so a rolling upgrade drops caches rather than keeping stale ones.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import astuple, dataclass
from typing import Literal, NamedTuple

from xla_costmodel.service.core.redis_store import Forged

# The name predates the other kinds of event; kept so that processes of two
# versions still hear (and drop everything on) each other's messages.
CHANNEL = "costmodel:measurements:v1"
# A message carries the time it was sent: one older than this (or, in the bus, not
# newer than its origin's last) is a replay. Hosts' clocks must agree well within it.
REPLAY_WINDOW_S = 30.0


@dataclass(frozen=True)
class MeasurementsWritten:
    """Measurements of a graph on a target were committed."""

    collection: str
    target: str
    graph_id: str


@dataclass(frozen=True)
class DecisionsWritten:
    """A decision of a graph on a target was committed (it may have replaced one
    stored under another HLO fingerprint)."""

    collection: str
    target: str
    graph_id: str


@dataclass(frozen=True)
class WritersChanged:
    """A writer was revoked or purged: its decisions (and with a purge its
    measurements) left the database; the targets writers may write changed."""


@dataclass(frozen=True)
class Missed:
    """Events may have been lost (the subscription came back up, or a sealed
    message could not be read): anything may have changed. Never sent."""


Event = MeasurementsWritten | DecisionsWritten | WritersChanged | Missed
# How an event reached a subscriber: this process's publish, another's message, or
# the subscription coming (back) up.
Source = Literal["local", "remote", "resubscribe"]
# Runs in the event loop, inside ``publish`` or the listener: must not block.
Subscriber = Callable[[Event, Source], None]

_KINDS: dict[str, type[MeasurementsWritten | DecisionsWritten | WritersChanged]] = {
    "measurements": MeasurementsWritten,
    "decisions": DecisionsWritten,
    "writers": WritersChanged,
}
_NAMES = {kind: name for name, kind in _KINDS.items()}
_FIELDS = {"measurements": 3, "decisions": 3, "writers": 0}


class Message(NamedTuple):
    """One publish, as heard."""

    origin: str  # the publishing process
    seq: int  # its sequence number
    events: tuple[Event, ...]


def encode(origin: str, seq: int, events: Iterable[Event]) -> bytes:
    """The message body (unsealed). ``Missed`` is not sent."""
    sent_ms = int(time.time() * 1000)
    body = [[_NAMES[type(e)], *astuple(e)] for e in events if not isinstance(e, Missed)]
    return json.dumps([origin, seq, sent_ms, body]).encode()


def decode(body: bytes) -> Message:
    """The message in an (opened) body. Raises ``Forged`` (sent outside
    ``REPLAY_WINDOW_S``: a replay), ValueError (not a message of this version)."""
    try:
        fields = json.loads(body)
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    if (
        not isinstance(fields, list)
        or len(fields) != 4
        or not isinstance(fields[0], str)
        or not all(type(f) is int for f in fields[1:3])
        or not isinstance(fields[3], list)
    ):
        raise ValueError("expected [origin, seq, sent_ms, events]")
    if abs(time.time() - fields[2] / 1000) > REPLAY_WINDOW_S:
        raise Forged(f"sent {fields[2]} ms after the epoch: outside the window")
    return Message(fields[0], fields[1], tuple(_event(e) for e in fields[3]))


def _event(fields: object) -> Event:
    if (
        not isinstance(fields, list)
        or not fields
        or fields[0] not in _KINDS
        or len(fields) != 1 + _FIELDS[fields[0]]
        or not all(isinstance(f, str) for f in fields[1:])
    ):
        raise ValueError(f"expected [kind, *fields], not {fields!r:.200}")
    return _KINDS[fields[0]](*fields[1:])
