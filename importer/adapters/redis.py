"""Redis (redis-py asyncio) as an accelerator: progress hints and the creation rate limit.

The only module importing ``redis``. Nothing here is the truth, and every failure is absorbed:

* :class:`HintPublisher` publishes a job's progress hint (``PUBLISH importer:progress:<job>``)
  as a task, bounded in number and in time; when too many are in flight the hint is dropped.
* :class:`ProgressHub` holds one pattern subscription per process and wakes the SSE streams
  watching a job; while Redis is away they poll PostgreSQL at their usual cadence.
* :class:`RedisRateLimiter` counts a client's creations per fixed window (``INCR`` + ``EXPIRE``
  in one ``MULTI``); if Redis is down or slower than ~50 ms the request goes through.

No locks live in Redis: finalization is exactly-once by a guarded PostgreSQL update and a
primary key (see ``importer/core/accelerator.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from importer.core.accelerator import (
    ALLOWED,
    PROGRESS_PATTERN,
    RATE_WINDOW_S,
    Outage,
    ProgressHint,
    RateDecision,
    encode_hint,
    job_of_channel,
    progress_channel,
    rate_decision,
    rate_key,
)
from importer.core.errors import AcceleratorError
from importer.ports import HintWatch

log = structlog.get_logger(__name__)

# Connecting and each command: Redis is local and fast, or it is treated as away.
CONNECT_TIMEOUT_S = 0.25
COMMAND_TIMEOUT_S = 0.5
# An idle connection is PINGed before use after this many seconds (a dead peer found early).
HEALTH_CHECK_S = 5
# A hint's publish: bounded in time and in number (hints are advisory: dropped beyond).
PUBLISH_TIMEOUT_S = 0.25
MAX_PUBLISHES_IN_FLIGHT = 64
# The rate limit's round trip: slower than this and the request goes through (fail open).
RATE_LIMIT_TIMEOUT_S = 0.05
# After a failure, Redis is left alone this long: a dead accelerator costs no timeouts.
COOLDOWN_S = 1.0
# The hub's wait between subscription attempts while Redis is away, and its read's wake-up.
RESUBSCRIBE_S = 1.0
LISTEN_TIMEOUT_S = 1.0
# The window's key lives a window longer than the window: a late INCR never leaves it forever.
RATE_KEY_TTL_S = 2 * RATE_WINDOW_S
# What counts as Redis being away (a timeout raised by asyncio, or a socket error).
FAILURES = (RedisError, OSError, TimeoutError)

Client = aioredis.Redis


def connect(url: str) -> Client:
    """The process's one client (a pool; connects lazily): short timeouts, no retries."""
    client: Client = aioredis.Redis.from_url(
        url,
        socket_timeout=COMMAND_TIMEOUT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        health_check_interval=HEALTH_CHECK_S,
        retry=Retry(NoBackoff(), 0),
    )
    return client


# --- progress hints: out --------------------------------------------------------------------


class HintPublisher:
    """Publishes hints as owned tasks; ``offer`` never blocks nor raises."""

    def __init__(self, client: Client, *, max_in_flight: int = MAX_PUBLISHES_IN_FLIGHT) -> None:
        self._client = client
        self._max_in_flight = max_in_flight
        self._in_flight: set[asyncio.Task[None]] = set()
        self._outage = Outage(COOLDOWN_S)
        self.dropped = 0  # hints not sent: too many in flight, or Redis away

    def offer(self, hint: ProgressHint) -> None:
        if len(self._in_flight) >= self._max_in_flight or self._outage.skipping():
            self.dropped += 1
            return
        task = asyncio.create_task(self._publish(hint), name=f"progress-hint:{hint.job_id}")
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _publish(self, hint: ProgressHint) -> None:
        try:
            async with asyncio.timeout(PUBLISH_TIMEOUT_S):
                await self._client.publish(progress_channel(hint.job_id), encode_hint(hint))
        except FAILURES as exc:
            self.dropped += 1
            if self._outage.failed():
                log.warning("redis_publish_failed", error=repr(exc))

    async def aclose(self) -> None:
        """Let the publishes in flight end (each is bounded in time)."""
        await asyncio.gather(*self._in_flight, return_exceptions=True)


# --- progress hints: in ---------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Watch:
    hub: ProgressHub
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def live(self) -> bool:
        return self.hub.live


class ProgressHub:
    """One pattern subscription for the process; each hint wakes the watchers of its job.

    The listener is a named task that resubscribes while Redis is away; losing or regaining
    the subscription wakes every watcher (they read the job, and poll while it is lost).
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._watchers: dict[uuid.UUID, set[_Watch]] = {}
        self._task: asyncio.Task[None] | None = None
        self._outage = Outage(RESUBSCRIBE_S)
        self.live = False

    @contextlib.asynccontextmanager
    async def watch(self, job_id: uuid.UUID) -> AsyncIterator[HintWatch]:
        watch = _Watch(self)
        self._watchers.setdefault(job_id, set()).add(watch)
        try:
            yield watch
        finally:
            watchers = self._watchers.get(job_id, set())
            watchers.discard(watch)
            if not watchers:
                self._watchers.pop(job_id, None)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="redis-progress-hub")

    async def stop(self) -> None:
        """Cancel the listener: it holds nothing but a blocked read of hints."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._set_live(False)

    async def _run(self) -> None:
        while True:
            try:
                await self._listen()
            except FAILURES as exc:
                if self._outage.failed():
                    log.warning("redis_subscribe_failed", error=repr(exc))
            except Exception:  # an accelerator's bug means polling, not a crash
                log.exception("redis_progress_hub_failed")
            self._set_live(False)
            await asyncio.sleep(RESUBSCRIBE_S)

    async def _listen(self) -> None:
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.psubscribe(PROGRESS_PATTERN)
            self._set_live(True)
            log.info("redis_progress_subscribed")
            while True:
                message = await pubsub.get_message(
                    ignore_subscribe_messages=True, timeout=LISTEN_TIMEOUT_S
                )
                if message is not None:
                    self._dispatch(message)
        finally:
            with contextlib.suppress(*FAILURES):
                await pubsub.aclose()

    def _dispatch(self, message: dict[str, Any]) -> None:
        if message.get("type") != "pmessage":
            return
        job_id = job_of_channel(message.get("channel", b""))
        for watch in self._watchers.get(job_id, ()) if job_id is not None else ():
            watch.changed.set()

    def _set_live(self, live: bool) -> None:
        if live != self.live:
            self.live = live
            for watchers in self._watchers.values():
                for watch in watchers:
                    watch.changed.set()


# --- the creation rate limit ----------------------------------------------------------------


class RedisRateLimiter:
    """A fixed-window counter per client; fails open (allows) when Redis fails or is slow."""

    def __init__(
        self, client: Client, per_minute: int, *, timeout_s: float = RATE_LIMIT_TIMEOUT_S
    ) -> None:
        self._client = client
        self._limit = per_minute
        self._timeout_s = timeout_s
        self._outage = Outage(COOLDOWN_S)

    async def admit(self, client_id: int) -> RateDecision:
        if self._outage.skipping():
            return ALLOWED
        now = _wall_clock()
        try:
            async with asyncio.timeout(self._timeout_s):
                count = await self._count(rate_key(client_id, now))
        except FAILURES as exc:
            if self._outage.failed():
                log.warning("rate_limit_unavailable", error=repr(exc))
            return ALLOWED
        return rate_decision(count, self._limit, now)

    async def _count(self, key: str) -> int:
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.incr(key)
            pipe.expire(key, RATE_KEY_TTL_S)
            count, _ = await pipe.execute()
        return int(count)


def _wall_clock() -> float:
    # Windows are wall-clock minutes, the same on every instance (whatever their start time).
    return time.time()


# --- the whole accelerator ------------------------------------------------------------------


class RedisAccelerator:
    """The client and what uses it, for one process; :meth:`aclose` at shutdown."""

    def __init__(self, client: Client, rate_limit_per_minute: int) -> None:
        self._client = client
        self.publisher = HintPublisher(client)
        self.hub = ProgressHub(client)
        self.limiter = RedisRateLimiter(client, rate_limit_per_minute)

    @classmethod
    def from_url(cls, url: str, rate_limit_per_minute: int) -> RedisAccelerator:
        return cls(connect(url), rate_limit_per_minute)

    def offer_hint(self, hint: ProgressHint) -> None:
        self.publisher.offer(hint)

    async def ping(self) -> None:
        """Raise if Redis does not answer (readiness: reported, never failing the server)."""
        try:
            await self._client.ping()
        except FAILURES as exc:
            raise AcceleratorError(f"redis: {exc!r}") from exc

    async def aclose(self) -> None:
        await self.hub.stop()
        await self.publisher.aclose()
        with contextlib.suppress(*FAILURES):
            await self._client.aclose()
