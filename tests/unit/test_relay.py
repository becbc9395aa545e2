"""The outbox relay's loop with an in-memory outbox and publisher: failures back off and are
logged once, confirmed messages only are marked, unknown topics are reported, stop ends it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

import pytest
from structlog.testing import capture_logs

from importer.core.errors import BrokerError, TransientStoreError
from importer.core.models import OutboxMessage
from importer.ports import MessagePublisher
from importer.services.relay import OutboxRelay

pytestmark = pytest.mark.timeout(30)

QUEUES = {"notification": "q/notification", "sms/firing-intent": "q/sms"}


class MemoryOutbox:
    def __init__(self, messages: Sequence[OutboxMessage]) -> None:
        self.rows = {m.id: m for m in messages}
        self.published: set[int] = set()
        self.fail_rounds = 0  # the next rounds that fail as if the database were away
        self.written = asyncio.Event()
        self.closed = False

    async def publish_pending(
        self,
        limit: int,
        topics: Sequence[str],
        publish: Callable[[Sequence[OutboxMessage]], Awaitable[Collection[int]]],
    ) -> int:
        if self.fail_rounds:
            self.fail_rounds -= 1
            raise TransientStoreError("connection lost")
        pending = [
            m for i, m in sorted(self.rows.items()) if i not in self.published and m.topic in topics
        ][:limit]
        if pending:
            self.published.update(await publish(pending))
        return len(pending)

    async def unknown_topics(self, topics: Sequence[str]) -> dict[str, int]:
        unknown: dict[str, int] = {}
        for i, m in self.rows.items():
            if i not in self.published and m.topic not in topics:
                unknown[m.topic] = unknown.get(m.topic, 0) + 1
        return unknown

    async def wait_for_messages(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.written.wait(), timeout_s)
        self.written.clear()

    async def close(self) -> None:
        self.closed = True


class FlakyPublisher:
    def __init__(self, sent: list[tuple[str, str]], failures: list[str]) -> None:
        self.sent = sent
        self.failures = failures  # message ids whose next publish fails

    async def publish(
        self,
        queue: str,
        body: bytes,
        *,
        message_id: str,
        headers: Mapping[str, Any] | None = None,
    ) -> None:
        if message_id in self.failures:
            self.failures.remove(message_id)
            raise BrokerError(f"publish {message_id}: connection closed")
        self.sent.append((queue, message_id))

    async def close(self) -> None:
        pass


def message(row_id: int, topic: str = "notification") -> OutboxMessage:
    return OutboxMessage(row_id, f"m:{row_id}", topic, b"{}")


async def until(condition: Callable[[], bool]) -> None:
    while not condition():  # noqa: ASYNC110 (the fakes' state has no event to await)
        await asyncio.sleep(0.01)


async def test_confirmed_messages_are_marked_and_a_failed_one_waits_for_the_next_round() -> None:
    outbox = MemoryOutbox([message(1), message(2, "sms/firing-intent"), message(3, "odd/topic")])
    outbox.fail_rounds = 1
    sent: list[tuple[str, str]] = []
    failures = ["m:2"]
    opened = 0

    async def open_publisher() -> MessagePublisher:
        nonlocal opened
        opened += 1
        return FlakyPublisher(sent, failures)

    relay = OutboxRelay(outbox, open_publisher, QUEUES.get, list(QUEUES), poll_s=0.05)
    with capture_logs() as logs:
        task = asyncio.create_task(relay.run())
        await asyncio.wait_for(until(lambda: outbox.published == {1, 2}), 20)
        relay.stop()
        await asyncio.wait_for(task, 5)

    assert sent == [("q/notification", "m:1"), ("q/sms", "m:2")]  # m:1 once, m:2 after the retry
    assert opened == 2  # the broker error dropped the publisher; the next round reopened it
    events = [entry["event"] for entry in logs]
    # the database, then the broker: one run of failures, logged once, and its end once
    assert events.count("outbox_relay_failing") == 1
    assert events.count("outbox_relay_recovered") == 1
    unknown = [entry for entry in logs if entry["event"] == "outbox_topic_unknown"]
    assert [(u["topic"], u["messages"]) for u in unknown] == [("odd/topic", 1)]
    assert outbox.closed
    assert relay.published == 2


async def test_stop_ends_an_idle_relay_at_once() -> None:
    outbox = MemoryOutbox([])

    async def open_publisher() -> MessagePublisher:
        return FlakyPublisher([], [])

    stop = asyncio.Event()
    relay = OutboxRelay(outbox, open_publisher, QUEUES.get, list(QUEUES), stop=stop, poll_s=60)
    task = asyncio.create_task(relay.run())
    await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 1.0)  # not after the 60 s poll


async def test_a_broker_that_never_answers_keeps_the_relay_alive() -> None:
    outbox = MemoryOutbox([message(1)])
    attempts = 0

    async def open_publisher() -> MessagePublisher:
        nonlocal attempts
        attempts += 1
        raise BrokerError("connect: ConnectionRefusedError")

    relay = OutboxRelay(outbox, open_publisher, QUEUES.get, list(QUEUES))
    with capture_logs() as logs:
        task = asyncio.create_task(relay.run())
        await asyncio.wait_for(until(lambda: attempts >= 2), 5)
        assert not task.done()
        assert not relay.healthy
        relay.stop()
        await asyncio.wait_for(task, 5)
    assert [e["event"] for e in logs].count("outbox_relay_failing") == 1
    assert outbox.published == set()
