"""Chunk messages over RabbitMQ (aio-pika): the batch publisher of a coordinator and the chunk
consumer every instance runs, both on one robust connection (:class:`Fanout`).

The consumer reads the main queue with a prefetch of ``concurrency`` and handles each delivery
in its own named task (:class:`~importer.pipeline.fanout.ChunkHandler` decides); a
delivery redelivered too often unacked (a crash loop) is rejected into the retry chain unworked,
where it is counted, before the quorum queue's delivery limit would drop it (see ``broker``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass

import structlog
from aio_pika.abc import (
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustConnection,
)

from importer.adapters.rabbit import broker
from importer.core import codec
from importer.core.errors import BrokerError
from importer.core.models import Batch, Job
from importer.ports import DeliveryHandler

log = structlog.get_logger(__name__)

# How long a stopping consumer waits for the deliveries it is working on.
DRAIN_TIMEOUT_S = 30.0
# How long a coordinator keeps trying to publish a batch through a broker outage.
PUBLISH_PATIENCE_S = 120.0


@dataclass(slots=True)
class AmqpDelivery:
    """A delivery of the main queue, ended exactly once (fanout.Delivery)."""

    message: AbstractIncomingMessage
    publisher: broker.Publisher
    topology: broker.Topology

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def attempts(self) -> int:
        return broker.attempts_of(self.message, queue=self.topology.main)

    @property
    def deferrals(self) -> int:
        value = (self.message.headers or {}).get(broker.DEFERRALS_HEADER)
        return value if isinstance(value, int) and value > 0 else 0

    async def ack(self) -> None:
        with broker.translated_errors("ack"):
            await self.message.ack()

    async def retry(self) -> None:
        with broker.translated_errors("reject"):
            await self.message.reject(requeue=False)  # → retry queue (TTL) → main

    async def defer(self) -> None:
        headers = broker.republish_headers(self.message, queue=self.topology.main)
        headers[broker.DEFERRALS_HEADER] = self.deferrals + 1
        message_id = self.message.message_id or f"unidentified:{uuid.uuid4()}"
        await self.publisher.publish(
            self.topology.wait, self.message.body, message_id=message_id, headers=headers
        )
        await self.ack()

    async def dead_letter(self, error: str) -> None:
        await broker.dead_letter(self.publisher, self.topology, self.message, error)
        await self.ack()


class AmqpBatchPublisher:
    """A coordinator's batches to the main queue, each confirmed (fanout.BatchPublisher).

    A publish the broker did not confirm (it is restarting, the connection dropped: the robust
    connection is reconnecting) is tried again with backoff for up to ``patience_s``; a copy
    that did arrive unconfirmed is a duplicate the lanes make a no-op. After that the
    BrokerError goes up: the worker leaves the job to be resumed from its checkpoint.
    """

    def __init__(
        self,
        publisher: broker.Publisher,
        topology: broker.Topology,
        *,
        patience_s: float = PUBLISH_PATIENCE_S,
        compiled: bool = True,
    ) -> None:
        self._publisher = publisher
        self._topology = topology
        self._patience_s = patience_s
        self._encode = codec.implementation(compiled).encode

    async def publish(self, job: Job, batch: Batch) -> None:
        owner = job.lease_owner
        if owner is None:
            raise ValueError("only a leased job's batches are published")
        body = self._encode(job.id, owner, batch)
        message_id = codec.message_id(job.id, batch)
        deadline = time.monotonic() + self._patience_s
        pause = 0.2
        while True:
            try:
                await self._publisher.publish(self._topology.main, body, message_id=message_id)
            except BrokerError as exc:
                if time.monotonic() + pause > deadline:
                    raise
                log.warning("chunk_publish_retry", message_id=message_id, error=str(exc))
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)
            else:
                return


class Fanout:
    """The broker side of a multi-instance process: one connection, a confirmed publisher
    (batches, re-publishes, dead letters) and the chunk consumer."""

    def __init__(
        self,
        url: str,
        topology: broker.Topology,
        handler: DeliveryHandler,
        *,
        prefetch: int,
        name: str = "importer",
        compiled: bool = True,
    ) -> None:
        self._url = url
        self._compiled = compiled
        self.topology = topology
        self._handler = handler
        self._prefetch = prefetch
        self._name = name
        self._connection: AbstractRobustConnection | None = None
        self._publisher: broker.Publisher | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def batches(self) -> AmqpBatchPublisher:
        if self._publisher is None:
            raise RuntimeError("the fanout is not open")
        return AmqpBatchPublisher(self._publisher, self.topology, compiled=self._compiled)

    async def open(self) -> None:
        """Connect, declare the queues and open the publisher (before any worker runs)."""
        self._connection = await broker.connect(self._url, name=self._name)
        try:
            with broker.translated_errors("open a channel"):
                channel = await self._connection.channel()
            try:
                await broker.declare(channel, self.topology)
            finally:
                with broker.translated_errors("close"):
                    await channel.close()
            self._publisher = await broker.Publisher.open(self._connection)
        except BaseException:
            await self.close()
            raise

    async def consume(self, stop: asyncio.Event) -> None:
        """Consume chunk messages until ``stop``; then finish the deliveries in hand."""
        if self._connection is None:
            raise RuntimeError("the fanout is not open")
        with broker.translated_errors("open the consumer channel"):
            channel = await self._connection.channel()
            await channel.set_qos(prefetch_count=self._prefetch)
            # Declared (idempotently), not just looked up: a robust channel restores the
            # queues it declared, and their consumers, after the broker comes back.
            main = self.topology.main
            queue = await channel.declare_queue(
                main, durable=True, arguments=self.topology.queue_arguments()[main]
            )
        try:
            await self._consume_until(queue, stop)
        finally:
            with contextlib.suppress(BrokerError), broker.translated_errors("close"):
                await channel.close()

    async def _consume_until(self, queue: AbstractQueue, stop: asyncio.Event) -> None:
        with broker.translated_errors("consume"):
            tag = await queue.consume(self._on_message)
        log.info("chunk_consumer_started", queue=queue.name, prefetch=self._prefetch)
        await stop.wait()
        with contextlib.suppress(BrokerError), broker.translated_errors("cancel"):
            await queue.cancel(tag)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=DRAIN_TIMEOUT_S)
        log.info("chunk_consumer_stopped", in_flight=sum(not t.done() for t in self._tasks))

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        task = asyncio.create_task(self._handle(message), name=f"chunk:{message.message_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, message: AbstractIncomingMessage) -> None:
        """One delivery; a broker failure leaves it unacked (redelivered later, a no-op if done)."""
        publisher = self._publisher
        assert publisher is not None
        try:
            if broker.over_redelivered(message, self.topology):
                log.warning("chunk_redelivered_too_often", message_id=message.message_id)
                with broker.translated_errors("reject"):
                    await message.reject(requeue=False)
                return
            await self._handler.handle(AmqpDelivery(message, publisher, self.topology))
        except BrokerError as exc:
            log.warning("chunk_delivery_unfinished", message_id=message.message_id, error=str(exc))
        except Exception:  # a bug, not the content (the handler routes every content problem)
            # Into the retry chain, counted, instead of a crash loop of this process.
            log.exception("chunk_handler_failed", message_id=message.message_id)
            with contextlib.suppress(BrokerError), broker.translated_errors("reject"):
                await message.reject(requeue=False)

    async def close(self) -> None:
        publisher, self._publisher = self._publisher, None
        connection, self._connection = self._connection, None
        with contextlib.suppress(BrokerError):
            if publisher is not None:
                await publisher.close()
            if connection is not None:
                with broker.translated_errors("close"):
                    await connection.close()
