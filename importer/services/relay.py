"""The outbox relay: delivers the messages finalization writes to the outbox, at least once.

Each round, in one database transaction: lock a batch of unpublished rows (``FOR UPDATE SKIP
LOCKED``: relays of several instances share the work), publish each to its topic's queue under
the row's stable message id, await the broker's confirms, mark the confirmed rows published,
commit. A crash between the confirms and the commit re-publishes the same messages, with the
same ids, on the next round (consumers dedupe on the id).

It waits for work on ``LISTEN importer_outbox`` (a trigger notifies after every insert) or a
poll. A broker or database failure never ends the relay: it is logged once, the relay backs off
and tries again (reopening its broker connection), and its recovery is logged once. No driver is
imported here: the relay talks to the ``Outbox`` and ``MessagePublisher`` ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence

import structlog

from importer.core.errors import BrokerError, StoreError
from importer.core.models import OutboxMessage
from importer.ports import MessagePublisher, Outbox
from importer.services.rounds import backoff_s, wait_or_stop

log = structlog.get_logger(__name__)

# Messages locked and published per transaction.
BATCH_SIZE = 100
# An idle relay looks at the outbox this often even without a notification.
POLL_S = 1.0
# How often unpublished messages of unknown topics are reported (an error each time).
UNKNOWN_TOPICS_EVERY_S = 60.0
# Closing a publisher whose broker is gone must not hold the relay.
CLOSE_TIMEOUT_S = 5.0


class OutboxRelay:
    """Publishes the outbox until ``stop`` is set (see the module's docstring)."""

    def __init__(
        self,
        outbox: Outbox,
        open_publisher: Callable[[], Awaitable[MessagePublisher]],
        queue_for: Callable[[str], str | None],
        topics: Sequence[str],
        *,
        stop: asyncio.Event | None = None,
        batch_size: int = BATCH_SIZE,
        poll_s: float = POLL_S,
    ) -> None:
        """``open_publisher`` connects to the broker (declaring its queues); ``queue_for`` maps
        a topic of ``topics`` to its queue. ``stop`` (or :meth:`stop`) ends :meth:`run`."""
        self._outbox = outbox
        self._open_publisher = open_publisher
        self._queue_for = queue_for
        self._topics = list(topics)
        self._stop = stop or asyncio.Event()
        self._batch_size = batch_size
        self._poll_s = poll_s
        self._publisher: MessagePublisher | None = None
        self._failures = 0
        self._failure: str | None = None
        self._unknown_checked_at: float | None = None
        self.published = 0  # messages confirmed by the broker since the start

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def healthy(self) -> bool:
        """The last round succeeded (the broker and the database answer)."""
        return self._failure is None

    def stop(self) -> None:
        """End :meth:`run` after the round in progress (its batch is published and marked)."""
        self._stop.set()

    async def run(self) -> None:
        """Relay until ``stop``; then close the broker connection and the LISTEN one."""
        log.info("outbox_relay_started", topics=self._topics)
        try:
            while not self._stop.is_set():
                await self._round()
        finally:
            await self._close_publisher()
            with contextlib.suppress(StoreError):
                await self._outbox.close()
            log.info("outbox_relay_stopped", published=self.published)

    async def _round(self) -> None:
        """One batch; when it was not full, wait for more (or the poll, or ``stop``)."""
        try:
            locked = await self._relay_batch()
        except (BrokerError, StoreError) as exc:
            await self._failed(exc)
            return
        self._recovered()
        if locked < self._batch_size:
            await self._wait(self._outbox.wait_for_messages(self._poll_s))

    async def _relay_batch(self) -> int:
        if self._publisher is None:
            self._publisher = await self._open_publisher()
        await self._report_unknown_topics()
        errors: list[BrokerError] = []

        async def publish(messages: Sequence[OutboxMessage]) -> list[int]:
            return await self._publish_all(messages, errors)

        locked = await self._outbox.publish_pending(self._batch_size, self._topics, publish)
        if errors:  # the confirmed ones are marked; the others wait for the next round
            raise errors[0]
        return locked

    async def _publish_all(
        self, messages: Sequence[OutboxMessage], errors: list[BrokerError]
    ) -> list[int]:
        """Publish concurrently (the confirms are pipelined); the ids the broker confirmed."""
        results = await asyncio.gather(
            *(self._publish(m) for m in messages), return_exceptions=True
        )
        confirmed = []
        for message, result in zip(messages, results, strict=True):
            if result is None:
                confirmed.append(message.id)
            elif isinstance(result, BrokerError):
                errors.append(result)
            else:  # a bug, not the broker: it ends the relay (its supervisor says why)
                raise result
        self.published += len(confirmed)
        return confirmed

    async def _publish(self, message: OutboxMessage) -> None:
        queue = self._queue_for(message.topic)
        assert queue is not None, message.topic  # lock_outbox selects the known topics only
        assert self._publisher is not None
        await self._publisher.publish(queue, message.payload, message_id=message.message_id)

    async def _report_unknown_topics(self) -> None:
        now = time.monotonic()
        due = self._unknown_checked_at is None or now - self._unknown_checked_at >= (
            UNKNOWN_TOPICS_EVERY_S
        )
        if not due:
            return
        self._unknown_checked_at = now
        for topic, count in (await self._outbox.unknown_topics(self._topics)).items():
            log.error("outbox_topic_unknown", topic=topic, messages=count)

    async def _failed(self, exc: BrokerError | StoreError) -> None:
        """Log the first failure of a run of them; drop the publisher on a broker error (the
        next round reconnects); back off."""
        self._failures += 1
        if self._failure is None:
            log.warning("outbox_relay_failing", error=str(exc), kind=type(exc).__name__)
        self._failure = str(exc)
        if isinstance(exc, BrokerError):
            await self._close_publisher()
        await self._wait(asyncio.sleep(backoff_s(self._failures)))

    def _recovered(self) -> None:
        if self._failure is not None:
            log.info("outbox_relay_recovered", failures=self._failures)
        self._failure = None
        self._failures = 0

    async def _wait(self, waiting: Awaitable[None]) -> None:
        """Until ``waiting`` ends or ``stop`` is set; a failed wait is a failed round."""
        error = await wait_or_stop(waiting, self._stop, "outbox-relay-stop")
        if isinstance(error, StoreError):
            await self._failed(error)
        elif isinstance(error, Exception):
            raise error

    async def _close_publisher(self) -> None:
        publisher, self._publisher = self._publisher, None
        if publisher is None:
            return
        with contextlib.suppress(BrokerError, TimeoutError):
            await asyncio.wait_for(publisher.close(), CLOSE_TIMEOUT_S)
