"""The dead-letter queue of chunk messages for its owner (aio-pika): look, and replay.

Looking is a bounded peek. Up to ``max_messages`` messages are taken with ``basic.get`` and
held unacknowledged (so each get returns the next message, never one already seen), then every
one not replayed is handed back with ``nack(requeue=True)``. Nothing is consumed for good: if
the process dies meanwhile, the broker returns the held messages when the channel closes. A
return counts as a delivery on a quorum queue (``x-delivery-count``): the dead-letter queue is
declared without a delivery limit, and RabbitMQ 3.x applies none; on 4.x, whose quorum queues
default to a limit of 20, give the dead-letter queue a policy with ``delivery-limit`` -1 before
peeking at it often.

A replay publishes the message to the main queue with :func:`broker.republish_headers` (the
attempt count carries on: catalog T12) and its original id, awaits the confirm, and only then
acks the dead-letter copy: a crash between the two leaves a duplicate (same message id; the
chunk ledger makes the second a no-op), never a loss.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Sequence

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractRobustConnection

from importer.adapters.rabbit import broker
from importer.core import codec
from importer.core.errors import MalformedMessageError
from importer.core.models import DeadLetter

REPLAYED_AT_HEADER = "x-importer-replayed-at"  # ISO 8601, UTC: the last replay
# The dead-lettering's own headers: a replayed message is no longer dead.
_DEATH_NOTES = (broker.ERROR_HEADER, broker.DEAD_LETTERED_AT_HEADER)
# The longest a basic.get waits for the broker's answer.
GET_TIMEOUT_S = 10.0


def letter_of(message: AbstractIncomingMessage, topology: broker.Topology) -> DeadLetter:
    """What a dead-lettered message says: its chunk (when it is a chunk message), why it died,
    after how many failed deliveries and when."""
    headers = message.headers or {}
    job_id = chunk = partition = None
    try:
        decoded = codec.decode(message.body)
    except MalformedMessageError:
        pass
    else:
        job_id, chunk, partition = decoded.job_id, decoded.batch.chunk_no, decoded.batch.partition
    return DeadLetter(
        message_id=message.message_id,
        job_id=job_id,
        chunk=chunk,
        partition=partition,
        error=_text(headers.get(broker.ERROR_HEADER)),
        attempts=broker.attempts_of(message, queue=topology.main),
        dead_lettered_at=_text(headers.get(broker.DEAD_LETTERED_AT_HEADER)),
    )


class AmqpHeldDeadLetter:
    """A dead letter held unacknowledged (ports.HeldDeadLetter)."""

    def __init__(
        self,
        message: AbstractIncomingMessage,
        letter: DeadLetter,
        publisher: broker.Publisher,
        topology: broker.Topology,
    ) -> None:
        self._message = message
        self._letter = letter
        self._publisher = publisher
        self._topology = topology
        self.settled = False

    @property
    def letter(self) -> DeadLetter:
        return self._letter

    async def replay(self) -> None:
        headers = broker.republish_headers(self._message, queue=self._topology.main)
        for name in _DEATH_NOTES:
            headers.pop(name, None)
        headers[REPLAYED_AT_HEADER] = dt.datetime.now(dt.UTC).isoformat()
        message_id = self._message.message_id or f"unidentified:{uuid.uuid4()}"
        await self._publisher.publish(
            self._topology.main, self._message.body, message_id=message_id, headers=headers
        )
        with broker.translated_errors("ack"):
            await self._message.ack()  # only after the main queue confirmed the copy
        self.settled = True

    async def give_back(self) -> None:
        if not self.settled:
            with broker.translated_errors("nack"):
                await self._message.nack(requeue=True)
            self.settled = True


class AmqpDeadLetters:
    """The dead-letter queue of ``topology`` (ports.DeadLetterQueue); one connection per
    browse: the owner's operations are rare, and hold nothing between them."""

    def __init__(
        self, url: str, topology: broker.Topology, *, name: str = "importer-dead-letters"
    ) -> None:
        self._url = url
        self._topology = topology
        self._name = name

    @contextlib.asynccontextmanager
    async def browse(self, max_messages: int) -> AsyncIterator[Sequence[AmqpHeldDeadLetter]]:
        connection = await broker.connect(self._url, name=self._name)
        try:
            with broker.translated_errors("open a channel"):
                channel = await connection.channel()
            await broker.declare(channel, self._topology)  # idempotent: the queue exists
            publisher = await broker.Publisher.open(connection)
            held = await self._take(channel, publisher, max_messages)
            try:
                yield held
            finally:
                for letter in held:
                    await letter.give_back()
        finally:
            await _close(connection)

    async def _take(
        self, channel: AbstractChannel, publisher: broker.Publisher, max_messages: int
    ) -> list[AmqpHeldDeadLetter]:
        held: list[AmqpHeldDeadLetter] = []
        with broker.translated_errors(f"read {self._topology.dead}"):
            queue = await channel.get_queue(self._topology.dead, ensure=False)
            while len(held) < max_messages:
                message = await queue.get(no_ack=False, fail=False, timeout=GET_TIMEOUT_S)
                if message is None:
                    break
                letter = letter_of(message, self._topology)
                held.append(AmqpHeldDeadLetter(message, letter, publisher, self._topology))
        return held


async def _close(connection: AbstractRobustConnection) -> None:
    with contextlib.suppress(Exception), broker.translated_errors("close"):
        await connection.close()


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None
