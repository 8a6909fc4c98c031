"""Measurement generations without a database round trip per rank.

    gens = Generations(redis, events, freshness_s=0.1, alone=False)
    gens.start()                                       in the lifespan; aclose() on exit
    await gens.current(collection, target, gid, read)  the cached generation, or read()
    await gens.wrote(collection, target, gid)          after a commit, before the ack
    gens.on_change(listener)                           e.g. wake the knowledge refresher
    gens.on_key_change(listener)                       per graph: e.g. the decision cache
    gens.trust_s()                                     how long a value read now is trusted

A generation is what the store answers for a key's measurements (count, newest id:
``MeasurementStore.generation``; ``gid=None``: the whole target's,
``target_generation``). ``current`` answers from memory while the cached value is
known fresh, else awaits ``read`` (the caller's database query) and caches it.

How a cached value stays fresh, and the staleness bound after ``wrote`` returns:

- The writing process drops its own entry at once (0 ms) and PUBLISHes the key on
  ``CHANNEL``. Every process subscribes (a task of the app's loop) and drops the
  entries a message names: the bound is Redis's delivery latency while the
  subscription is live (tests/service/test_generations.py measures it: ≤ 100 ms).
- While the subscription is not live (Redis down, reconnecting, or no Redis with
  other processes sharing the database) a value is trusted for ``freshness_s``
  after its read began (``COSTMODEL_FRESHNESS_S``): that is the bound then. When the
  subscription comes (back) up every entry is dropped: messages may have been lost.
- ``alone`` (no other service process writes the database: one worker, not Ray,
  SQLite; ``is_alone``) makes local invalidation complete for the service's own
  writes: values are trusted for ``live_trust_s`` (``LIVE_TRUST_S``), the bound for a
  write by another program (``costmodel measurements purge``, ``tokens revoke``),
  which with Redis tells every process at once instead (``announce``).
- A live subscription that goes silent is declared dead after ``2 * heartbeat_s``
  without a reply to its PINGs; and a value is never trusted longer than
  ``live_trust_s`` while live, a backstop for a publish lost to a writer's own
  Redis outage.

A read that began before an invalidation of its key is returned but not cached
(it may predate the write: ``trusted.py``, which the decision cache uses too).
Redis failures never fail a caller: they are logged, counted and only shorten the
trust to ``freshness_s``.

Messages are sealed with the service's key (``redis_store.Seal``): one that is not
(anyone else with the Redis password), or a replay of a sealed one (an origin's
sequence number not newer than its last, or sent more than ``REPLAY_WINDOW_S`` ago),
is dropped and counted as a Redis integrity failure, so forged invalidations cannot
make every process re-read the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Literal, NamedTuple, Protocol

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from xla_costmodel.service.core.lru import LRU
from xla_costmodel.service.core.redis_store import Forged, Seal
from xla_costmodel.service.core.trusted import TrustedCache

log = logging.getLogger(__name__)

CHANNEL = "costmodel:measurements:v1"
# The longest a cached generation is trusted without a notification (module doc).
LIVE_TRUST_S = 60.0
# Messages are sealed (``redis_store.Seal``), carry their origin's sequence number
# and the time sent: one older than this (or not newer than its origin's last) is a
# replay. Hosts' clocks must agree to well within it.
REPLAY_WINDOW_S = 30.0
ORIGINS = 4096  # publishers remembered (a process's origin lives as long as it)
Generation = tuple[int, int]  # (count, newest id) of the measurements


class GenerationKey(NamedTuple):
    """Whose generation: a graph's, or (``graph_id`` None) its whole target's."""

    collection: str
    target: str
    graph_id: str | None


# (collection, target) written; None: anything may have changed.
Listener = Callable[[tuple[str, str] | None], None]
# The key written (a graph's); None: anything may have changed.
KeyListener = Callable[[GenerationKey | None], None]
# What dropped cached generations: this process's write, another's message, or the
# subscription coming (back) up.
InvalidatedBy = Literal["local", "remote", "resubscribe"]
ErrorOp = Literal["publish", "subscribe", "message"]
_REDIS_ERRORS = (RedisError, OSError, TimeoutError)


class GenerationEvents(Protocol):
    """What ``Generations`` reports (``xla_costmodel.service.metrics.stores.GenerationMetrics``)."""

    def generation_lookup(self, hit: bool) -> None: ...
    def generation_invalidated(self, source: InvalidatedBy) -> None: ...
    def generation_subscription(self, live: bool) -> None: ...
    def generation_error(self, op: ErrorOp) -> None: ...
    def redis_integrity_failure(self, kind: str) -> None: ...


def is_alone(workers: int, ray: bool, database_url: str | None) -> bool:
    """Whether this process is the database's only writer: one uvicorn worker, not
    a Ray replica, and SQLite (PostgreSQL is there to be shared by replicas)."""
    sqlite = database_url is None or database_url.startswith("sqlite")
    return workers == 1 and not ray and sqlite


async def announce(redis: Redis, seal: Seal | None = None) -> None:
    """Tell every subscribed process that measurements or writers changed outside
    the service (a purge, a revocation): each drops every generation it cached, and
    its key listeners everything they keep (the decision cache: a revoked writer's
    decisions). ``seal``: the service's
    (``Settings.redis_seal_key``), else the processes drop it as forged. Raises
    ``RedisError``; for tools, not the request path."""
    message = _encode(seal, uuid.uuid4().hex, 1, None, None, None)
    await redis.publish(CHANNEL, message)


class Generations:
    def __init__(
        self,
        redis: Redis | None,
        events: GenerationEvents,
        *,
        freshness_s: float,
        alone: bool,
        entries: int = 16_384,
        live_trust_s: float = LIVE_TRUST_S,
        heartbeat_s: float = 1.0,
        reconnect_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        seal: Seal | None = None,
    ) -> None:
        self.redis = redis
        self.seal = seal  # None: messages unsealed (tests)
        self._sent = 0  # this process's message sequence
        # Each origin's newest sequence number heard: a replayed message is dropped.
        self._heard: LRU[str, int] = LRU(ORIGINS)
        self.events = events
        self.freshness_s = freshness_s
        self.alone = alone
        self.live_trust_s = live_trust_s
        self.heartbeat_s = heartbeat_s
        self.reconnect_s = reconnect_s
        self._origin = uuid.uuid4().hex  # this process's own messages are skipped
        self._cache: TrustedCache[GenerationKey, Generation] = TrustedCache(
            entries, self.trust_s, clock
        )
        self._listeners: list[Listener] = []
        self._key_listeners: list[KeyListener] = []
        self._live = False
        self._task: asyncio.Task[None] | None = None

    @property
    def live(self) -> bool:
        """Whether the subscription is up (invalidations from others arrive)."""
        return self._live

    def __len__(self) -> int:
        return len(self._cache)

    def on_change(self, listener: Listener) -> None:
        """Call ``listener`` on every write this process learns of, local or remote
        (``(collection, target)``; None: anything may have changed). It runs in the
        event loop and must not block."""
        self._listeners.append(listener)

    def on_key_change(self, listener: KeyListener) -> None:
        """Like ``on_change``, with the graph: ``(collection, target, gid)``. For
        caches of other per-graph data that ``wrote`` invalidates with the
        generations (``core/decision_cache.py``)."""
        self._key_listeners.append(listener)

    def trust_s(self) -> float:
        """How long a value read now may be trusted without a notification: the
        staleness bound of the module doc, for caches that follow ``on_key_change``."""
        if self._live or self.alone:
            return self.live_trust_s
        return self.freshness_s

    # -- the request path ---------------------------------------------------------

    async def current(
        self,
        collection: str,
        target: str,
        gid: str | None,
        read: Callable[[], Awaitable[Generation]],
    ) -> Generation:
        """The generation of (collection, target, gid): cached while known fresh,
        else ``await read()`` (its errors propagate; nothing is cached then)."""
        key = GenerationKey(collection, target, gid)
        value, hit = await self._cache.get(key, read)
        self.events.generation_lookup(hit)
        return value

    async def wrote(self, collection: str, target: str, gid: str) -> None:
        """This process committed measurements of (collection, target, gid): forget
        them here at once, then tell the other processes (best-effort)."""
        self._invalidate(collection, target, gid, "local")
        if self.redis is None:
            return
        try:
            await self.redis.publish(CHANNEL, self._sealed(collection, target, gid))
        except _REDIS_ERRORS as exc:
            self.events.generation_error("publish")
            log.warning("generation not published", extra={"error": repr(exc)})

    def _invalidate(
        self, collection: str, target: str, gid: str, source: InvalidatedBy
    ) -> None:
        # A graph's write changes its target's generation too.
        graph = GenerationKey(collection, target, gid)
        for key in (graph, GenerationKey(collection, target, None)):
            self._cache.invalidate(key)
        self.events.generation_invalidated(source)
        self._notify(graph)

    def _drop_all(self, source: InvalidatedBy) -> None:
        self._cache.clear()
        self.events.generation_invalidated(source)
        self._notify(None)

    def _notify(self, key: GenerationKey | None) -> None:
        change = None if key is None else (key[0], key[1])
        calls = [partial(f, change) for f in self._listeners]
        calls += [partial(f, key) for f in self._key_listeners]
        for call in calls:
            try:
                call()
            except Exception:  # one listener's bug must not stop invalidation
                log.exception("generation listener failed")

    # -- the subscriber -----------------------------------------------------------

    def start(self) -> None:
        """Start the subscriber (with Redis; a task of the running loop)."""
        if self.redis is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._subscribe())

    async def aclose(self) -> None:
        """Stop the subscriber. The Redis client is the caller's to close (after)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._set_live(False)

    async def _subscribe(self) -> None:
        assert self.redis is not None
        while True:
            pubsub = self.redis.pubsub()
            try:
                await self._listen(pubsub)
            except (*_REDIS_ERRORS, _Silent) as exc:
                if self._live:
                    log.warning("generations unsubscribed", extra={"error": repr(exc)})
                self.events.generation_error("subscribe")
            except Exception:  # a bug: stay in the short bound, and try again
                log.exception("generations subscriber failed")
                self.events.generation_error("subscribe")
            finally:
                self._set_live(False)
                # A fresh PubSub each time: redis-py would otherwise resubscribe
                # silently on reconnect, and the entries would not be dropped.
                with contextlib.suppress(*_REDIS_ERRORS):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            await asyncio.sleep(self.reconnect_s)

    async def _listen(self, pubsub: PubSub) -> None:
        await pubsub.subscribe(CHANNEL)
        loop = asyncio.get_running_loop()
        heard = pinged = loop.time()
        while True:
            message = await pubsub.get_message(timeout=self.heartbeat_s)
            now = loop.time()
            if message is not None:
                heard = now
                self._received(message)
            if now - heard > 2 * self.heartbeat_s:
                raise _Silent(f"no reply from Redis for {now - heard:.1f} s")
            if now - pinged >= self.heartbeat_s:
                await pubsub.ping()
                pinged = now

    def _received(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "subscribe":
            # Up (again): whatever was published while down is lost.
            self._drop_all("resubscribe")
            self._set_live(True)
            log.info("generations subscribed")
        elif kind == "message":
            self._message(message.get("data"))

    def _sealed(self, collection: str, target: str, gid: str) -> bytes:
        self._sent += 1
        return _encode(self.seal, self._origin, self._sent, collection, target, gid)

    def _message(self, data: object) -> None:
        try:
            origin, seq, collection, target, gid = _decode(self.seal, data)
        except Forged:
            # Not the service's: dropped, never "assume the worst" (a forger would
            # flood every process with drop-everything).
            self.events.redis_integrity_failure("message")
            return
        except ValueError:
            self.events.generation_error("message")
            self._drop_all("remote")  # sealed but unreadable: assume the worst
            return
        if origin == self._origin:
            return  # invalidated locally before it was published
        if seq <= (self._heard.get(origin) or 0):
            self.events.redis_integrity_failure("replay")
            return
        self._heard.put(origin, seq)
        if collection is None or target is None or gid is None:
            self._drop_all("remote")  # an announcement
        else:
            self._invalidate(collection, target, gid, "remote")

    def _set_live(self, live: bool) -> None:
        if live != self._live:
            self._live = live
            self.events.generation_subscription(live)


class _Silent(Exception):
    """The subscription's connection stopped answering PINGs."""


def _encode(
    seal: Seal | None,
    origin: str,
    seq: int,
    collection: str | None,
    target: str | None,
    gid: str | None,
) -> bytes:
    sent_ms = int(time.time() * 1000)
    body = json.dumps([origin, seq, sent_ms, collection, target, gid]).encode()
    return body if seal is None else seal.seal(CHANNEL, body)


def _decode(
    seal: Seal | None, data: object
) -> tuple[str, int, str | None, str | None, str | None]:
    """Raises ``Forged`` (a bad seal, or sent outside ``REPLAY_WINDOW_S``: a replay),
    ValueError (sealed but not a message)."""
    if not isinstance(data, bytes):
        raise Forged("not bytes") if seal is not None else ValueError("not bytes")
    body = data if seal is None else seal.open(CHANNEL, data)
    try:
        fields = json.loads(body)
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    if (
        not isinstance(fields, list)
        or len(fields) != 6
        or not isinstance(fields[0], str)
        or not all(type(f) is int for f in fields[1:3])
        or not all(f is None or isinstance(f, str) for f in fields[3:])
    ):
        raise ValueError("expected [origin, seq, sent_ms, collection, target, gid]")
    if abs(time.time() - fields[2] / 1000) > REPLAY_WINDOW_S:
        raise Forged(f"sent {fields[2]} ms after the epoch: outside the window")
    return fields[0], fields[1], fields[3], fields[4], fields[5]
