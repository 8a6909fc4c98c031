"""The event bus: invalidation events (``events.py``) delivered to every process.

    bus = EventBus(Channel(redis=..., seal=...), metrics, freshness_s=, alone=)
    bus.subscribe(generations.heard)          build_core wires every subscriber
    await bus.publish(MeasurementsWritten(...))    after a commit, before the answer
    await bus.listen()                the lifespan's task group runs it until cancelled
    bus.trust_s()                     how long a subscriber trusts what it read now
    await announce(redis, seal)       a tool: WritersChanged, to every process

Delivery, and the staleness bound once ``publish`` returned:

- The publishing process delivers to its own subscribers at once (0 ms), then
  PUBLISHes on ``CHANNEL``. Every process listens (``listen``) and delivers what
  others publish: the bound is Redis's delivery latency while the subscription is
  live (tests/service/test_events.py checks the behaviour, the bench the bound).
- While it is not live (Redis down, reconnecting, or no Redis with other processes
  sharing the database) a cached value is trusted for ``freshness_s`` after its
  read began (``COSTMODEL_FRESHNESS_S``): that is the bound then.
- ``alone`` (no other service process writes the database: ``is_alone``) makes
  local delivery complete for the service's own writes: values are trusted for
  ``live_trust_s`` (``LIVE_TRUST_S``), the bound for a change by another program
  (a purge, a revocation), which with Redis tells every process at once instead.
- A live subscription that goes silent is declared dead after ``2 * heartbeat_s``
  without a reply to its PINGs; and a value is never trusted longer than
  ``live_trust_s``, a backstop for a publish lost to a writer's own Redis outage.

Messages are sealed with the service's key (``redis_store.Seal``): one that is not,
or a replay of a sealed one (an origin's sequence number not newer than its last,
or sent more than ``events.REPLAY_WINDOW_S`` ago), is dropped and counted as a Redis
integrity failure: forged events cannot make every process re-read the database.
Redis failures never fail a publisher: they are logged, counted and only shorten the
trust to ``freshness_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from xla_costmodel.service.core.events import (
    CHANNEL,
    Event,
    Missed,
    Source,
    Subscriber,
    WritersChanged,
    decode,
    encode,
)
from xla_costmodel.service.core.lru import LRU
from xla_costmodel.service.core.redis_store import Forged, Seal

log = logging.getLogger(__name__)

# The longest a cached value is trusted without an event (module doc).
LIVE_TRUST_S = 60.0
ORIGINS = 4096  # publishers remembered (a process's origin lives as long as it)

ErrorOp = Literal["publish", "subscribe", "message"]
_REDIS_ERRORS = (RedisError, OSError, TimeoutError)


class BusEvents(Protocol):
    """What the bus reports (``xla_costmodel.service.metrics.stores.GenerationMetrics``:
    the subscription's metrics kept their names from when generations owned it)."""

    def generation_subscription(self, live: bool) -> None: ...
    def generation_error(self, op: ErrorOp) -> None: ...
    def redis_integrity_failure(self, kind: str) -> None: ...


@dataclass(frozen=True, kw_only=True)
class Channel:
    """Where events travel between processes: ``redis``'s pub/sub, sealed with the
    service's key (None: unsealed, for tests)."""

    redis: Redis
    seal: Seal | None = None
    heartbeat_s: float = 1.0
    reconnect_s: float = 0.5


def is_alone(workers: int, ray: bool, database_url: str | None) -> bool:
    """Whether this process is the database's only writer: one uvicorn worker, not
    a Ray replica, and SQLite (PostgreSQL is there to be shared by replicas)."""
    sqlite = database_url is None or database_url.startswith("sqlite")
    return workers == 1 and not ray and sqlite


async def announce(redis: Redis, seal: Seal | None = None) -> None:
    """Tell every listening process that writers changed outside the service (a
    purge, a revocation). ``seal``: the service's
    (``Seal(settings.stores.redis_seal_key)``), else the processes drop it as forged. Raises ``RedisError``; for tools, not the
    request path."""
    body = encode(uuid.uuid4().hex, 1, (WritersChanged(),))
    await redis.publish(CHANNEL, body if seal is None else seal.seal(CHANNEL, body))


class EventBus:
    """Delivers each event to every subscriber, in this process at once and in the
    others through ``channel`` (None: this process alone hears its events)."""

    def __init__(
        self,
        channel: Channel | None,
        metrics: BusEvents,
        *,
        freshness_s: float,
        alone: bool,
        live_trust_s: float = LIVE_TRUST_S,
    ) -> None:
        self.channel = channel
        self.metrics = metrics
        self.freshness_s = freshness_s
        self.alone = alone
        self.live_trust_s = live_trust_s
        self._subscribers: list[Subscriber] = []
        self._origin = uuid.uuid4().hex  # this process's own messages are skipped
        self._sent = 0  # this process's message sequence
        # Each origin's newest sequence number heard: a replayed message is dropped.
        self._heard: LRU[str, int] = LRU(ORIGINS)
        self._live = False

    @property
    def live(self) -> bool:
        """Whether the subscription is up (other processes' events arrive)."""
        return self._live

    def subscribe(self, subscriber: Subscriber) -> None:
        """Deliver every event to ``subscriber``, this process's and others'."""
        self._subscribers.append(subscriber)

    def trust_s(self) -> float:
        """How long a value read now may be trusted without an event: the staleness
        bound of the module doc, for the subscribers' caches."""
        if self._live or self.alone:
            return self.live_trust_s
        return self.freshness_s

    async def publish(self, *events: Event) -> None:
        """This process committed what ``events`` say: deliver them here at once,
        then to the other processes (best-effort: never raises)."""
        for event in events:
            self._deliver(event, "local")
        if self.channel is None:
            return
        self._sent += 1
        body = encode(self._origin, self._sent, events)
        seal = self.channel.seal
        try:
            await self.channel.redis.publish(
                CHANNEL, body if seal is None else seal.seal(CHANNEL, body)
            )
        except _REDIS_ERRORS as exc:
            self.metrics.generation_error("publish")
            log.warning("events not published", extra={"error": repr(exc)})

    def _deliver(self, event: Event, source: Source) -> None:
        for subscriber in self._subscribers:
            try:
                subscriber(event, source)
            except Exception:  # one subscriber's bug must not stop the others
                log.exception("event subscriber failed")

    # -- the listener -------------------------------------------------------------

    async def listen(self) -> None:
        """Deliver other processes' events until cancelled (a task of the lifespan's
        task group); without a channel, return at once."""
        channel = self.channel
        if channel is None:
            return
        while True:
            pubsub = channel.redis.pubsub()
            try:
                await self._listen(pubsub, channel.heartbeat_s)
            except (*_REDIS_ERRORS, _Silent) as exc:
                if self._live:
                    log.warning("events unsubscribed", extra={"error": repr(exc)})
                self.metrics.generation_error("subscribe")
            except Exception:  # a bug: stay in the short bound, and try again
                log.exception("events listener failed")
                self.metrics.generation_error("subscribe")
            finally:
                self._set_live(False)
                # A fresh PubSub each time: redis-py would otherwise resubscribe
                # silently on reconnect, and nothing would hear ``Missed``.
                with contextlib.suppress(*_REDIS_ERRORS):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            await asyncio.sleep(channel.reconnect_s)

    async def _listen(self, pubsub: PubSub, heartbeat_s: float) -> None:
        await pubsub.subscribe(CHANNEL)
        loop = asyncio.get_running_loop()
        heard = pinged = loop.time()
        while True:
            message = await pubsub.get_message(timeout=heartbeat_s)
            now = loop.time()
            if message is not None:
                heard = now
                self._received(message)
            if now - heard > 2 * heartbeat_s:
                raise _Silent(f"no reply from Redis for {now - heard:.1f} s")
            if now - pinged >= heartbeat_s:
                await pubsub.ping()
                pinged = now

    def _received(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "subscribe":
            # Up (again): whatever was published while down is lost.
            self._deliver(Missed(), "resubscribe")
            self._set_live(True)
            log.info("events subscribed")
        elif kind == "message":
            self._message(message.get("data"))

    def _opened(self, data: object) -> bytes:
        """The body of a message; ``Forged`` if sealed and not by the service."""
        seal = None if self.channel is None else self.channel.seal
        if not isinstance(data, bytes):
            raise ValueError("not bytes") if seal is None else Forged("not bytes")
        return data if seal is None else seal.open(CHANNEL, data)

    def _message(self, data: object) -> None:
        try:
            heard = decode(self._opened(data))
        except Forged:
            # Not the service's: dropped, never "assume the worst" (a forger would
            # flood every process with drop-everything).
            self.metrics.redis_integrity_failure("message")
            return
        except ValueError:
            self.metrics.generation_error("message")
            self._deliver(Missed(), "remote")  # sealed but unreadable
            return
        if heard.origin == self._origin:
            return  # delivered locally before it was published
        if heard.seq <= (self._heard.get(heard.origin) or 0):
            self.metrics.redis_integrity_failure("replay")
            return
        self._heard.put(heard.origin, heard.seq)
        for event in heard.events:
            self._deliver(event, "remote")

    def _set_live(self, live: bool) -> None:
        if live != self._live:
            self._live = live
            self.metrics.generation_subscription(live)


class _Silent(Exception):
    """The subscription's connection stopped answering PINGs."""
