"""The RabbitMQ adapter and the outbox relay against the real broker (and PostgreSQL).

Every test declares its own queues behind a unique prefix and deletes them at the end, so tests
running in parallel (or other sessions on the same broker) never share a queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import aio_pika
import asyncpg
import orjson
import pytest
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustConnection

from importer.adapters.postgres.outbox import PostgresOutbox
from importer.adapters.postgres.pool import connect_pool
from importer.adapters.rabbit.broker import (
    ATTEMPTS_HEADER,
    ERROR_HEADER,
    FIRST_DEATH_HEADERS,
    ORIGINAL_ID_HEADER,
    Publisher,
    Topology,
    attempts_of,
    connect,
    dead_letter,
    declare,
    open_publisher,
    over_redelivered,
    redeliveries_of,
    republish_headers,
)
from importer.core.errors import BrokerError
from importer.core.models import OutboxMessage
from importer.ports import MessagePublisher
from importer.services.relay import OutboxRelay
from tests.jobs_support import eventually
from tests.support import cpf, fetch, import_file, write_csv

pytestmark = [pytest.mark.rabbitmq, pytest.mark.integration, pytest.mark.timeout(90)]

RABBITMQ_URL = os.environ.get("RABBITMQ_TEST_URL", "amqp://guest:guest@127.0.0.1:5672/")
TTL_MS = 400  # the retry queue's delay in these tests (30 s in production)
WAIT_S = 20.0


@pytest.fixture
def topology() -> Topology:
    return Topology.named(f"test-{uuid.uuid4().hex[:12]}/", retry_delay_ms=TTL_MS)


@pytest.fixture
async def connection(topology: Topology) -> AsyncIterator[AbstractRobustConnection]:
    conn = await connect(RABBITMQ_URL, name=f"importer-test-{topology.main}")
    try:
        yield conn
    finally:
        await conn.close()
        await _delete_queues(topology)


async def _delete_queues(topology: Topology) -> None:
    conn = await aio_pika.connect(RABBITMQ_URL)
    try:
        channel = await conn.channel()
        for name in topology.queue_arguments():
            await channel.queue_delete(name)
    finally:
        await conn.close()


@pytest.fixture
def client(client_ids: Iterator[int]) -> int:
    return next(client_ids)


def rabbitmqctl(*args: str) -> str:
    return subprocess.run(
        ["rabbitmqctl", "-q", *args], check=True, capture_output=True, text=True, timeout=60
    ).stdout


def listed_queues(prefix: str) -> dict[str, dict[str, Any]]:
    """The broker's view of our queues: name → {type, durable, arguments: [[key, type, value]]}."""
    out = rabbitmqctl("list_queues", "name", "type", "durable", "arguments", "--formatter", "json")
    return {q["name"]: q for q in json.loads(out) if q["name"].startswith(prefix)}


async def deliveries(
    connection: AbstractRobustConnection,
    queue_name: str,
    handle: Callable[[AbstractIncomingMessage, int], Awaitable[bool]],
) -> None:
    """Consume ``queue_name``, calling ``handle(message, index)`` until it returns True."""
    channel = await connection.channel()
    await channel.set_qos(prefetch_count=1)
    queue = await channel.get_queue(queue_name)
    finished = asyncio.Event()
    index = 0

    async def on_message(message: AbstractIncomingMessage) -> None:
        nonlocal index
        index += 1
        if await handle(message, index - 1):
            finished.set()

    tag = await queue.consume(on_message)
    try:
        await asyncio.wait_for(finished.wait(), WAIT_S)
    finally:
        await queue.cancel(tag)
        await channel.close()


async def drain(connection: AbstractRobustConnection, queue_name: str) -> list[aio_pika.Message]:
    """Every message now in ``queue_name`` (taken off it)."""
    channel = await connection.channel()
    queue = await channel.get_queue(queue_name)
    taken = []
    while (message := await queue.get(no_ack=True, fail=False)) is not None:
        taken.append(message)
    await channel.close()
    return taken


# --- topology ---------------------------------------------------------------------------------


async def test_declaration_is_idempotent_with_the_intended_arguments(
    connection: AbstractRobustConnection, topology: Topology
) -> None:
    channel = await connection.channel()
    await declare(channel, topology)
    await declare(channel, topology)  # again: nothing changes, nothing fails
    prefix = topology.main.split("/")[0]
    listed = listed_queues(prefix)
    assert set(listed) == set(topology.queue_arguments())
    for name, arguments in topology.queue_arguments().items():
        assert listed[name]["type"] == "quorum"
        assert listed[name]["durable"] is True
        declared = {key: value for key, _type, value in listed[name]["arguments"]}
        assert declared == arguments, name

    other = Topology.named(prefix + "/", retry_delay_ms=TTL_MS + 1)  # same names, other TTL
    with pytest.raises(BrokerError, match="PRECONDITION_FAILED"):
        await declare(await connection.channel(), other)


# --- the retry chain --------------------------------------------------------------------------


async def test_a_rejected_message_comes_back_after_the_ttl_counting_attempts(
    connection: AbstractRobustConnection, topology: Topology
) -> None:
    await declare(await connection.channel(), topology)
    publisher = await Publisher.open(connection)
    await publisher.publish(topology.main, b'{"chunk": 1}', message_id="chunk:1")
    seen: list[tuple[float, int]] = []

    async def reject_three_times(message: AbstractIncomingMessage, index: int) -> bool:
        seen.append((time.monotonic(), attempts_of(message, queue=topology.main)))
        if index < 3:
            await message.nack(requeue=False)  # the consumer's reject closes the loop
            return False
        await message.ack()
        return True

    await deliveries(connection, topology.main, reject_three_times)
    assert [attempts for _, attempts in seen] == [0, 1, 2, 3]
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(seen)]
    ttl_s = TTL_MS / 1000
    assert all(ttl_s * 0.9 <= gap <= ttl_s + 1.5 for gap in gaps), gaps


async def test_past_the_delivery_limit_a_message_is_dead_lettered_not_dropped(
    connection: AbstractRobustConnection,
) -> None:
    """Catalog T13: requeued past ``x-delivery-limit``, a message is dead-lettered into the
    retry queue (reason ``delivery_limit``, counted as a failed attempt), not dropped. (The
    TTL is long here: on 3.10 the retry → main hop would then drop it as a cycle without a
    reject; consumers reject first, see the next test.)"""
    topology = Topology.named(
        f"test-{uuid.uuid4().hex[:12]}/", retry_delay_ms=60_000, delivery_limit=2
    )
    try:
        await declare(await connection.channel(), topology)
        publisher = await Publisher.open(connection)
        await publisher.publish(topology.main, b"{}", message_id="chunk:3")

        async def requeue(message: AbstractIncomingMessage, index: int) -> bool:
            await message.nack(requeue=True)  # a consumer crash loop, say
            return index == 2  # the limit allows 3 deliveries

        await deliveries(connection, topology.main, requeue)
        (retried,) = await eventually(lambda: _some(drain(connection, topology.retry)), 5.0)
        assert retried.message_id == "chunk:3"
        assert retried.headers["x-first-death-reason"] == "delivery_limit"
        assert attempts_of(retried, queue=topology.main) == 1
        assert await drain(connection, topology.main) == []
    finally:
        await _delete_queues(topology)


async def test_a_consumer_rejecting_over_redelivered_messages_keeps_them_in_the_loop(
    connection: AbstractRobustConnection,
) -> None:
    topology = Topology.named(
        f"test-{uuid.uuid4().hex[:12]}/", retry_delay_ms=TTL_MS, delivery_limit=4
    )
    try:
        await declare(await connection.channel(), topology)
        publisher = await Publisher.open(connection)
        await publisher.publish(topology.main, b"{}", message_id="chunk:4")
        seen: list[tuple[int, int]] = []

        async def crash_loop_then_guard(message: AbstractIncomingMessage, index: int) -> bool:
            seen.append((redeliveries_of(message), attempts_of(message, queue=topology.main)))
            if attempts_of(message, queue=topology.main) == 1:
                await message.ack()  # back from the retry queue: the loop held
                return True
            if over_redelivered(message, topology):
                await message.nack(requeue=False)
            else:
                await message.nack(requeue=True)
            return False

        await deliveries(connection, topology.main, crash_loop_then_guard)
        assert seen == [(0, 0), (1, 0), (2, 0), (0, 1)]
    finally:
        await _delete_queues(topology)


async def _some(taking: Awaitable[list[aio_pika.Message]]) -> list[aio_pika.Message] | None:
    return (await taking) or None


async def test_a_replay_by_a_client_keeps_counting(
    connection: AbstractRobustConnection, topology: Topology
) -> None:
    """Catalog T12: after a client re-publish the count goes on from the carried header."""
    await declare(await connection.channel(), topology)
    publisher = await Publisher.open(connection)
    await publisher.publish(topology.main, b"{}", message_id="chunk:2", headers={"job": "j"})
    actions = ["reject", "reject", "republish", "reject", "ack"]
    seen: list[int] = []
    ids: list[str | None] = []

    async def act(message: AbstractIncomingMessage, index: int) -> bool:
        seen.append(attempts_of(message, queue=topology.main))
        ids.append(message.message_id)
        action = actions[index]
        if action == "reject":
            await message.nack(requeue=False)
        elif action == "republish":
            headers = republish_headers(message, queue=topology.main)
            await publisher.publish(
                topology.main, message.body, message_id="chunk:2", headers=headers
            )
            await message.ack()  # after the confirm
        else:
            assert message.headers["job"] == "j"
            await message.ack()
        return action == "ack"

    await deliveries(connection, topology.main, act)
    assert seen == [0, 1, 2, 2, 3]
    assert set(ids) == {"chunk:2"}


async def test_dead_letter_keeps_the_body_the_error_and_the_count(
    connection: AbstractRobustConnection, topology: Topology
) -> None:
    await declare(await connection.channel(), topology)
    publisher = await Publisher.open(connection)
    body = b'{"chunk": 7, "rows": []}'
    await publisher.publish(topology.main, body, message_id="chunk:7")

    async def fail_then_dead_letter(message: AbstractIncomingMessage, index: int) -> bool:
        if index < 2:
            await message.nack(requeue=False)
            return False
        await dead_letter(publisher, topology, message, "boom: chunk 7 always fails")
        await message.ack()  # only after the dead-letter queue confirmed
        return True

    await deliveries(connection, topology.main, fail_then_dead_letter)
    (dead,) = await drain(connection, topology.dead)
    assert dead.body == body
    assert dead.message_id == "chunk:7"
    assert dead.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    headers = dead.headers
    assert headers[ERROR_HEADER] == "boom: chunk 7 always fails"
    assert headers[ATTEMPTS_HEADER] == 2
    assert headers[ORIGINAL_ID_HEADER] == "chunk:7"
    assert headers[FIRST_DEATH_HEADERS[0]] == topology.main
    assert headers[FIRST_DEATH_HEADERS[1]] == "rejected"
    assert isinstance(headers[FIRST_DEATH_HEADERS[2]], str)
    assert "x-death" not in headers
    orjson.dumps(dict(headers))
    assert await drain(connection, topology.main) == []


async def test_publishing_to_a_missing_queue_raises(
    connection: AbstractRobustConnection, topology: Topology
) -> None:
    publisher = await Publisher.open(connection)
    with pytest.raises(BrokerError, match="returned"):
        await publisher.publish(topology.main + "-missing", b"{}", message_id="lost")
    await publisher.close()


# --- the outbox relay -------------------------------------------------------------------------


def relay_for(topology: Topology, outbox: PostgresOutbox, *, poll_s: float = 1.0) -> OutboxRelay:
    async def open_relay_publisher() -> MessagePublisher:
        return await open_publisher(RABBITMQ_URL, topology, name=f"relay-{topology.main}")

    return OutboxRelay(
        outbox, open_relay_publisher, topology.queue_for, list(topology.topics), poll_s=poll_s
    )


async def finished_import(dsn: str, tmp_path: Path, client: int) -> uuid.UUID:
    rows = [[f"Name {i}", cpf(i), f"p{i}@example.com.br"] for i in range(1, 6)]
    path = write_csv(tmp_path / "contacts.csv", ["nome", "cpf", "email"], rows)
    outcome = await import_file(dsn, path, client)
    return outcome.job_id


async def unpublished(dsn: str) -> int:
    rows = await fetch(dsn, "SELECT count(*) AS n FROM outbox WHERE published_at IS NULL")
    return int(rows[0]["n"])


async def all_published(dsn: str) -> bool | None:
    return True if await unpublished(dsn) == 0 else None


@contextlib.asynccontextmanager
async def running(relay: OutboxRelay) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(relay.run(), name="test-outbox-relay")
    try:
        yield task
    finally:
        relay.stop()
        await asyncio.wait_for(task, WAIT_S)


def ids_of(messages: Sequence[aio_pika.Message]) -> list[str | None]:
    return sorted(m.message_id for m in messages)


@pytest.fixture
async def outbox(db_dsn: str) -> AsyncIterator[PostgresOutbox]:
    pool = await connect_pool(db_dsn, 2)
    try:
        yield PostgresOutbox(pool, dsn=db_dsn)
    finally:
        await pool.close()


async def test_the_relay_publishes_each_outbox_row_once_and_marks_it(
    connection: AbstractRobustConnection,
    topology: Topology,
    db_dsn: str,
    outbox: PostgresOutbox,
    tmp_path: Path,
    client: int,
) -> None:
    job_id = await finished_import(db_dsn, tmp_path, client)
    assert await unpublished(db_dsn) == 2  # the notification and the stats refresh
    relay = relay_for(topology, outbox, poll_s=60.0)  # wake-ups come from LISTEN, not the poll
    async with running(relay):
        await eventually(lambda: all_published(db_dsn), WAIT_S)
        await asyncio.sleep(0.3)  # a duplicate, if any, would be published by now
        notes = await drain(connection, topology.notification)
        assert ids_of(notes) == [f"notification:{job_id}"]
        assert orjson.loads(notes[0].body)["job_id"] == str(job_id)
        refreshes = await drain(connection, topology.stats_refresh)
        assert ids_of(refreshes) == [f"stats-refresh:{job_id}"]
        assert orjson.loads(refreshes[0].body) == {"job_id": str(job_id), "client_id": client}

        # a row written while the relay idles wakes it through the trigger's NOTIFY
        await _insert_outbox(db_dsn, "wake:1", "sms/firing-intent", {"id": 1})
        await eventually(lambda: all_published(db_dsn), 10.0)
        assert ids_of(await drain(connection, topology.sms_intent)) == ["wake:1"]

        # a topic nobody knows stays unpublished; the relay goes on
        await _insert_outbox(db_dsn, "odd:1", "no/such-topic", {})
        await _insert_outbox(db_dsn, "wake:2", "hsm/importing-intent", {"id": 2})
        await eventually(
            lambda: _published_at(db_dsn, "wake:2"),
            10.0,
        )
        assert await _published_at(db_dsn, "odd:1") is None
    assert relay.published == 4


async def test_a_crash_between_publish_and_commit_republishes_under_the_same_ids(
    connection: AbstractRobustConnection,
    topology: Topology,
    db_dsn: str,
    outbox: PostgresOutbox,
    tmp_path: Path,
    client: int,
) -> None:
    job_id = await finished_import(db_dsn, tmp_path, client)
    await declare(await connection.channel(), topology)
    publisher = await Publisher.open(connection)

    async def publish_then_crash(messages: Sequence[OutboxMessage]) -> list[int]:
        for m in messages:
            queue = topology.queue_for(m.topic)
            assert queue is not None
            await publisher.publish(queue, m.payload, message_id=m.message_id)
        raise RuntimeError("crash after the confirms, before the commit")

    with pytest.raises(RuntimeError, match="before the commit"):
        await outbox.publish_pending(100, list(topology.topics), publish_then_crash)
    assert await unpublished(db_dsn) == 2  # rolled back: still to publish

    async with running(relay_for(topology, outbox)):
        await eventually(lambda: all_published(db_dsn), WAIT_S)
    notes = await drain(connection, topology.notification)
    assert ids_of(notes) == [f"notification:{job_id}"] * 2  # at least once, same id
    refreshes = await drain(connection, topology.stats_refresh)
    assert ids_of(refreshes) == [f"stats-refresh:{job_id}"] * 2


async def test_the_relay_survives_a_closed_connection_and_a_database_drop(
    connection: AbstractRobustConnection, topology: Topology, db_dsn: str, outbox: PostgresOutbox
) -> None:
    relay = relay_for(topology, outbox)
    async with running(relay) as task:
        await _insert_outbox(db_dsn, "before:1", "notification", {"n": 1})
        await eventually(lambda: all_published(db_dsn), WAIT_S)

        closed = await asyncio.to_thread(_close_connections_named, f"relay-{topology.main}")
        assert closed >= 1
        await _insert_outbox(db_dsn, "after:1", "notification", {"n": 2})
        await eventually(lambda: all_published(db_dsn), WAIT_S)

        await _terminate_backends(db_dsn)  # the pool's and the LISTEN connections
        await _insert_outbox(db_dsn, "after:2", "notification", {"n": 3})
        await eventually(lambda: all_published(db_dsn), WAIT_S)
        assert not task.done()
    assert ids_of(await drain(connection, topology.notification)) == [
        "after:1",
        "after:2",
        "before:1",
    ]


async def _insert_outbox(dsn: str, message_id: str, topic: str, payload: object) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "INSERT INTO outbox (message_id, topic, payload) VALUES ($1, $2, $3::jsonb)",
            message_id,
            topic,
            orjson.dumps(payload).decode(),
        )
    finally:
        await conn.close()


async def _published_at(dsn: str, message_id: str) -> object:
    rows = await fetch(dsn, "SELECT published_at FROM outbox WHERE message_id = $1", message_id)
    return rows[0]["published_at"]


async def _terminate_backends(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()


def _close_connections_named(name: str) -> int:
    """Close this test's relay connections only (``close_all_connections`` would also cut
    every other session using the shared broker).

    The JSON listing tells which connections carry ``name``; only the plain one prints a pid
    that ``close_connection`` accepts.
    """
    listing = rabbitmqctl("list_connections", "name", "client_properties", "--formatter", "json")
    ours = {
        c["name"] for c in json.loads(listing) if _connection_name(c["client_properties"]) == name
    }
    pids = [
        pid
        for pid, _, label in (
            line.partition("\t")
            for line in rabbitmqctl("list_connections", "pid", "name").splitlines()
        )
        if label in ours
    ]
    for pid in pids:
        rabbitmqctl("close_connection", pid, "test: broker closes the connection")
    return len(pids)


def _connection_name(properties: object) -> object:
    if isinstance(properties, dict):
        return properties.get("connection_name")
    if isinstance(properties, list):  # [[key, type, value], …]
        for entry in properties:
            if entry and entry[0] == "connection_name":
                return entry[-1]
    return None
