"""RabbitMQ adapter (aio-pika): the only module that talks to the broker's driver.

The topology (seed 003; every name carries the configured prefix)::

    main ──consumer rejects──▶ retry (TTL, no consumer) ──expires──▶ main
    main ──after the last retry, the consumer publishes (confirmed), then acks──▶ dead letter
    outbox topic ──the relay publishes (confirmed)──▶ one queue per topic

Attempts are counted from the broker's ``x-death`` while a message stays inside that loop, plus
the project's own ``x-importer-attempts`` header, which every client re-publish carries (RabbitMQ
3.13+ ignores a re-published ``x-death``: without it a replay from the dead-letter queue would
silently start counting again).

A consumer of the main queue must also reject (``nack(requeue=False)``) a message that
:func:`over_redelivered` flags, before working on it: a crash loop then goes round the retry
chain like any failure. The quorum queue's own ``x-delivery-limit`` is only a backstop: it
dead-letters into the retry queue with reason ``delivery_limit``, and RabbitMQ (verified on
3.10.8) then drops the message when the retry queue's TTL sends it back to the main queue, as
a dead-letter cycle without a reject in it.

Driver errors are translated once, here, into :class:`BrokerError`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import aio_pika
import aio_pika.exceptions
from aio_pika.abc import (
    AbstractChannel,
    AbstractConnection,
    AbstractMessage,
    AbstractRobustConnection,
)

from importer.core.errors import BrokerError, BrokerUnreachableError

# Headers of the project (all strings or integers: nothing a JSON log line cannot carry).
ATTEMPTS_HEADER = "x-importer-attempts"  # failed deliveries before the last client re-publish
ERROR_HEADER = "x-importer-error"  # why the message was dead-lettered
ORIGINAL_ID_HEADER = "x-importer-original-message-id"
DEAD_LETTERED_AT_HEADER = "x-importer-dead-lettered-at"  # ISO 8601, UTC
FIRST_DEATH_HEADERS = (  # the broker's first dead-lettering, kept as strings across re-publishes
    "x-importer-first-death-queue",
    "x-importer-first-death-reason",
    "x-importer-first-death-time",
)
# Dead-letterings that count as a failed delivery: the consumer's reject, and a quorum queue's
# delivery limit (a message requeued that often was delivered and never acked: a crash loop).
FAILED_REASONS = frozenset({"rejected", "delivery_limit"})
# The broker's own dead-letter (and delivery-count) headers. A client re-publish drops them:
# 3.13+ ignores them anyway, and 3.10 would go on counting from them on top of
# ``x-importer-attempts``.
BROKER_DEATH_HEADERS = frozenset(
    {
        "x-death",
        "x-delivery-count",
        "x-first-death-queue",
        "x-first-death-reason",
        "x-first-death-exchange",
        "x-last-death-queue",
        "x-last-death-reason",
        "x-last-death-exchange",
    }
)
# Deliveries of one message from the main queue without an ack (requeues, consumer crashes)
# before the quorum queue dead-letters it to the retry queue. Without a limit and a dead-letter
# exchange a quorum queue (4.0+) drops the message after 20 returns. A backstop: consumers
# reject at half of it (see over_redelivered).
DEFAULT_DELIVERY_LIMIT = 10
# The longest a publish waits for the broker's confirm; a longer wait counts as not sent.
PUBLISH_TIMEOUT_S = 30.0
# How soon a robust connection tries again after losing the broker.
RECONNECT_INTERVAL_S = 1.0
DEFAULT_RETRY_DELAY_MS = 30_000
# How long a chunk waits out of the main queue while an earlier chunk of its lane is missing.
DEFAULT_LANE_WAIT_MS = 1_000
DEFERRALS_HEADER = "x-importer-deferrals"  # times a chunk was deferred for its lane

# Outbox topics (finalize_job writes them) — the queue of each is the topic's default name.
NOTIFICATION_TOPIC = "notification"
HSM_INTENT_TOPIC = "hsm/importing-intent"
SMS_INTENT_TOPIC = "sms/firing-intent"
STATS_REFRESH_TOPIC = "contact-import/stats-refresh"


@dataclass(frozen=True, slots=True)
class Topology:
    """Queue names (prefix applied) and the retry chain's timing."""

    main: str = "contact-import/insert"
    retry: str = "contact-import/insert-retry"
    dead: str = "contact-import/insert-dead-letter"
    # Chunks whose lane is not at them yet wait here a moment, out of the main queue's way.
    wait: str = "contact-import/insert-wait"
    notification: str = "contact-import/notification"
    hsm_intent: str = HSM_INTENT_TOPIC
    sms_intent: str = SMS_INTENT_TOPIC
    stats_refresh: str = STATS_REFRESH_TOPIC
    retry_delay_ms: int = DEFAULT_RETRY_DELAY_MS
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT
    lane_wait_ms: int = DEFAULT_LANE_WAIT_MS

    @classmethod
    def named(
        cls,
        prefix: str = "",
        *,
        retry_delay_ms: int = DEFAULT_RETRY_DELAY_MS,
        delivery_limit: int = DEFAULT_DELIVERY_LIMIT,
        lane_wait_ms: int = DEFAULT_LANE_WAIT_MS,
    ) -> Topology:
        """The default names, each behind ``prefix`` (tests give each run its own)."""
        d = cls()
        return cls(
            main=prefix + d.main,
            retry=prefix + d.retry,
            dead=prefix + d.dead,
            wait=prefix + d.wait,
            notification=prefix + d.notification,
            hsm_intent=prefix + d.hsm_intent,
            sms_intent=prefix + d.sms_intent,
            stats_refresh=prefix + d.stats_refresh,
            retry_delay_ms=retry_delay_ms,
            delivery_limit=delivery_limit,
            lane_wait_ms=lane_wait_ms,
        )

    @property
    def topics(self) -> dict[str, str]:
        """Outbox topic → the queue its messages go to."""
        return {
            NOTIFICATION_TOPIC: self.notification,
            HSM_INTENT_TOPIC: self.hsm_intent,
            SMS_INTENT_TOPIC: self.sms_intent,
            STATS_REFRESH_TOPIC: self.stats_refresh,
        }

    @property
    def redelivery_guard(self) -> int:
        """Redeliveries after which a consumer rejects a message unworked (half the limit)."""
        return max(self.delivery_limit // 2, 1)

    def queue_for(self, topic: str) -> str | None:
        """The queue of an outbox topic; None for a topic this service does not know."""
        return self.topics.get(topic)

    def queue_arguments(self) -> dict[str, dict[str, Any]]:
        """Queue name → declaration arguments, every queue durable.

        Every queue is a quorum queue: replicated, durable, its messages survive a broker
        restart (catalog T34), and on 3.10+ it supports what the chain needs — message TTL and
        ``at-least-once`` dead-lettering (the message stays in its queue until the target queue
        confirms it; a classic queue dead-letters at most once, so a broker failure at that
        instant could lose a chunk). ``at-least-once`` requires ``x-overflow=reject-publish``;
        with no length limit declared it never rejects anything.

        The loop must contain the consumer's reject: the broker drops a message whose
        dead-letter cycle is made of TTL expiries only.
        """
        quorum: dict[str, Any] = {"x-queue-type": "quorum"}
        at_least_once = {"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}
        arguments = {
            self.main: {
                **quorum,
                **at_least_once,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": self.retry,
                "x-delivery-limit": self.delivery_limit,
            },
            self.retry: {
                **quorum,
                **at_least_once,
                "x-message-ttl": self.retry_delay_ms,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": self.main,
            },
            self.dead: dict(quorum),
            # A chunk deferred by its consumer (published here, then acked: not a failure)
            # comes back to main after the wait; one expiry, no cycle.
            self.wait: {
                **quorum,
                **at_least_once,
                "x-message-ttl": self.lane_wait_ms,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": self.main,
            },
        }
        arguments.update({queue: dict(quorum) for queue in self.topics.values()})
        return arguments


@contextlib.contextmanager
def translated_errors(action: str) -> Iterator[None]:
    """Driver errors, and the lost connections and time-outs under them, as BrokerError."""
    try:
        yield
    except aio_pika.exceptions.PublishError as exc:  # mandatory: no queue took the message
        raise BrokerError(f"{action}: the broker returned the message: {exc}") from exc
    except (
        aio_pika.exceptions.AMQPError,
        aio_pika.exceptions.ChannelInvalidStateError,
        ConnectionError,
        OSError,
        TimeoutError,
    ) as exc:
        raise BrokerError(f"{action}: {type(exc).__name__}: {exc}") from exc


async def connect(
    url: str, *, name: str = "importer", reconnect_interval_s: float = RECONNECT_INTERVAL_S
) -> AbstractRobustConnection:
    """A robust connection: it reconnects and restores its channels after a broker restart.

    A first connection that cannot be made is :class:`BrokerUnreachableError` (a BrokerError).
    """
    try:
        with translated_errors("connect"):
            return await aio_pika.connect_robust(
                url,
                reconnect_interval=reconnect_interval_s,
                client_properties={"connection_name": name},
            )
    except BrokerError as exc:
        cause = exc.__cause__
        detail = str(exc) if cause is None else f"{type(cause).__name__}: {cause}"
        raise BrokerUnreachableError(url, detail) from exc


async def declare(channel: AbstractChannel, topology: Topology) -> None:
    """Declare every queue of ``topology`` (idempotent).

    A queue that exists with other arguments is a BrokerError (the broker closes the channel
    with PRECONDITION_FAILED): delete it, or use another prefix.
    """
    for name, arguments in topology.queue_arguments().items():
        with translated_errors(f"declare {name}"):
            await channel.declare_queue(name, durable=True, arguments=arguments)


class Publisher:
    """Publishes persistent messages to queues through the default exchange, each confirmed.

    The channel has publisher confirms on (aio-pika's default) and ``on_return_raises``: a
    message no queue took is returned by the broker (``mandatory``) and raises. ``publish``
    returns only once the broker has the message; anything else raises BrokerError, and the
    message must be taken as not sent (a lost confirm may still have been delivered: messages
    carry stable ids, consumers dedupe).
    """

    def __init__(
        self,
        channel: AbstractChannel,
        *,
        connection: AbstractConnection | None = None,
        timeout_s: float = PUBLISH_TIMEOUT_S,
    ) -> None:
        """``connection``: closed with the publisher (when the publisher owns it)."""
        self._channel = channel
        self._connection = connection
        self._timeout_s = timeout_s

    @classmethod
    async def open(
        cls, connection: AbstractConnection, *, owns_connection: bool = False
    ) -> Publisher:
        with translated_errors("open a channel"):
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        return cls(channel, connection=connection if owns_connection else None)

    async def publish(
        self,
        queue: str,
        body: bytes,
        *,
        message_id: str,
        headers: Mapping[str, Any] | None = None,
    ) -> None:
        message = aio_pika.Message(
            body,
            message_id=message_id,
            headers=dict(headers or {}),
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        )
        with translated_errors(f"publish {message_id} to {queue}"):
            await self._channel.default_exchange.publish(
                message, routing_key=queue, mandatory=True, timeout=self._timeout_s
            )

    async def close(self) -> None:
        """Close the channel, and the connection when this publisher owns it."""
        with translated_errors("close"):
            try:
                await self._channel.close()
            finally:
                if self._connection is not None:
                    await self._connection.close()


async def open_publisher(url: str, topology: Topology, *, name: str = "importer") -> Publisher:
    """Connect, declare ``topology`` and open a publisher that owns the connection."""
    connection = await connect(url, name=name)
    try:
        with translated_errors("open a channel"):
            channel = await connection.channel()
        try:
            await declare(channel, topology)
        finally:
            with translated_errors("close"):
                await channel.close()
        return await Publisher.open(connection, owns_connection=True)
    except BaseException:
        with contextlib.suppress(BrokerError):
            await _close(connection)
        raise


async def _close(connection: AbstractConnection) -> None:
    with translated_errors("close"):
        await connection.close()


# --- attempts ---------------------------------------------------------------------------------


def attempts_of(message: AbstractMessage, *, queue: str | None = None) -> int:
    """Failed deliveries before this one: the carried ``x-importer-attempts`` plus the counts of
    the ``x-death`` entries whose reason is a failure (of ``queue`` only, when given).

    ``x-death`` holds one entry per (queue, reason), newest first, each with its ``count``.
    """
    headers = message.headers or {}
    return _carried_attempts(headers) + _failed_deaths(headers.get("x-death"), queue)


def redeliveries_of(message: AbstractMessage) -> int:
    """Deliveries of ``message`` by its quorum queue before this one that were never acked (its
    ``x-delivery-count``): requeues, or consumers that died holding it."""
    count = (message.headers or {}).get("x-delivery-count")
    return count if isinstance(count, int) and count > 0 else 0


def over_redelivered(message: AbstractMessage, topology: Topology) -> bool:
    """Whether a consumer of the main queue must reject ``message`` without working on it, so
    that a crash loop goes round the retry chain (counted) before the broker's delivery limit
    (which would end in a drop, see the module's docstring)."""
    return redeliveries_of(message) >= topology.redelivery_guard


def republish_headers(message: AbstractMessage, *, queue: str | None = None) -> dict[str, Any]:
    """Headers for a client re-publish of ``message`` (a replay, a dead-lettering).

    The broker's death headers are dropped; ``x-importer-attempts`` carries the total, and the
    first death is kept as strings: counting never restarts, whatever the broker version.
    """
    headers = dict(message.headers or {})
    kept = {k: v for k, v in headers.items() if k not in BROKER_DEATH_HEADERS}
    kept.update(_first_death(headers))
    kept[ATTEMPTS_HEADER] = attempts_of(message, queue=queue)
    return kept


async def dead_letter(
    publisher: Publisher, topology: Topology, message: AbstractMessage, error: str
) -> None:
    """Publish ``message``'s body to the dead-letter queue with why, and await the confirm.

    The caller acks ``message`` only after this returns: publish-then-ack is not atomic, and a
    crash between the two redelivers the message (it may then be dead-lettered twice, with the
    same message id) rather than lose it.
    """
    message_id = message.message_id or f"unidentified:{uuid.uuid4()}"
    headers = republish_headers(message, queue=topology.main)
    headers[ERROR_HEADER] = error
    headers[ORIGINAL_ID_HEADER] = message_id
    headers[DEAD_LETTERED_AT_HEADER] = dt.datetime.now(dt.UTC).isoformat()
    await publisher.publish(topology.dead, message.body, message_id=message_id, headers=headers)


def _carried_attempts(headers: Mapping[str, Any]) -> int:
    value: object = headers.get(ATTEMPTS_HEADER)
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, int | str):
        return 0  # absent: nothing carried
    try:
        return max(int(value), 0)
    except ValueError:  # garbled: nothing carried
        return 0


def _failed_deaths(x_death: object, queue: str | None) -> int:
    if not isinstance(x_death, list | tuple):
        return 0
    total = 0
    for entry in x_death:
        if not isinstance(entry, Mapping) or _text(entry.get("reason")) not in FAILED_REASONS:
            continue
        if queue is not None and _text(entry.get("queue")) != queue:
            continue
        count = entry.get("count")
        total += count if isinstance(count, int) and count > 0 else 1
    return total


def _first_death(headers: Mapping[str, Any]) -> dict[str, str]:
    """The oldest ``x-death`` entry as string headers, unless a re-publish already kept one."""
    if any(name in headers for name in FIRST_DEATH_HEADERS):
        return {}
    x_death = headers.get("x-death")
    if not isinstance(x_death, list | tuple) or not x_death:
        return {}
    oldest = x_death[-1]  # newest first
    if not isinstance(oldest, Mapping):
        return {}
    queue, reason, time = (oldest.get(k) for k in ("queue", "reason", "time"))
    return {
        FIRST_DEATH_HEADERS[0]: _text(queue) or "",
        FIRST_DEATH_HEADERS[1]: _text(reason) or "",
        FIRST_DEATH_HEADERS[2]: _time_text(time),
    }


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _time_text(value: object) -> str:
    """An AMQP timestamp (a datetime: orjson cannot serialize it by default) as ISO 8601."""
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return aware.isoformat()
    return "" if value is None else str(value)
