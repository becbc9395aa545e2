"""Several `importer worker` processes on one import over RabbitMQ (multi-instance mode): the
lease holder reads and publishes the chunks, every process applies them; the result is the
one-instance result (I1-I4, I6), and the work really is shared."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import aio_pika
import pytest

from importer.adapters.rabbit.broker import Topology
from importer.core import codec
from importer.core.failpoints import CRASH_EXIT_CODE
from importer.core.models import Batch, ContactRow, JobStatus
from tests.acceptance.conftest import RABBITMQ_URL, Contacts
from tests.acceptance.test_crash_resume import (
    CHUNK_SIZE,
    CLIENT,
    DEADLINE_S,
    PARTITIONS,
    _assert_invariants,
    _events,
    _is_terminal,
    _log_tail,
    _logged,
    _queued_job,
)
from tests.jobs_support import WAIT_S, Env, eventually, job_env, ledger_chunks
from tests.support import fetch

pytestmark = [pytest.mark.acceptance, pytest.mark.rabbitmq]


async def _worker(
    env: Env, log_path: Path, prefix: str, *, failpoints: str = "", retry_delay_ms: str = "1000"
) -> asyncio.subprocess.Process:
    environ = {
        **os.environ,
        "DATABASE_URL": env.dsn,
        "IMPORTER_STORAGE_DIR": str(log_path.parent / "objects"),  # job_env's store
        "IMPORTER_LEASE_SECONDS": "2",
        "IMPORTER_CONCURRENCY": str(PARTITIONS),
        "IMPORTER_LOG_FORMAT": "json",
        "IMPORTER_LOG_LEVEL": "info",
        "IMPORTER_FAILPOINTS": failpoints,
        "RABBITMQ_URL": RABBITMQ_URL,
        "IMPORTER_QUEUE_PREFIX": prefix,
        "IMPORTER_RETRY_DELAY_MS": retry_delay_ms,
    }
    environ.pop("S3_ENDPOINT_URL", None)
    with log_path.open("wb") as log:  # the child keeps its own descriptor
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "importer", "worker", env=environ, stderr=log
        )


@contextlib.asynccontextmanager
async def _running(
    env: Env,
    logs: Sequence[Path],
    prefix: str,
    failpoints: Sequence[str] | str = "",
    *,
    retry_delay_ms: str = "1000",
) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """One `importer worker` per log (``failpoints``: the same for all, or one each), yielded
    once every one consumes; at the end each one still running gets SIGTERM and is waited for
    (its exit code then in ``returncode``; the list may be changed inside, e.g. a restart)."""
    specs = [failpoints] * len(logs) if isinstance(failpoints, str) else list(failpoints)
    workers: list[asyncio.subprocess.Process] = []
    try:
        for log, spec in zip(logs, specs, strict=True):
            workers.append(
                await _worker(env, log, prefix, failpoints=spec, retry_delay_ms=retry_delay_ms)
            )
        for log in logs:  # every consumer is up before a job is queued
            await eventually(lambda log=log: _logged(log, "chunk_consumer_started"))
        yield workers
    finally:
        for worker in workers:
            if worker.returncode is None:
                worker.send_signal(signal.SIGTERM)
        for worker in workers:
            await asyncio.wait_for(worker.wait(), 60)


async def _finished(env: Env, job_id: uuid.UUID) -> None:
    """Wait (bounded by the catalog's deadline) until the job is terminal."""

    async def terminal() -> bool | None:
        return True if await _is_terminal(env, job_id) else None

    await eventually(terminal, timeout_s=DEADLINE_S)


@pytest.mark.parametrize("instances", [2, 3])
async def test_worker_processes_share_one_import_and_give_the_one_instance_result(
    db_dsn: str,
    tmp_path: Path,
    contacts: Contacts,
    prefix: str,
    instances: int,
) -> None:
    logs = [tmp_path / f"worker{i}.log" for i in range(instances)]
    async with job_env(db_dsn, tmp_path) as env:
        async with _running(env, logs, prefix) as workers:
            job_id = await _queued_job(env, contacts)
            await _finished(env, job_id)
        codes = [w.returncode for w in workers]
    assert codes == [0] * instances, [_log_tail(log) for log in logs]
    await _assert_invariants(db_dsn, job_id, contacts)
    applied = [sum(e["event"] == "chunk_applied" for e in _events(log)) for log in logs]
    claims = [sum(e["event"] == "job_claimed" for e in _events(log)) for log in logs]
    assert sum(claims) == 1  # one coordinator
    assert sum(applied) >= 2 * len(range(0, contacts.rows, CHUNK_SIZE))  # every batch, once+
    assert sum(n > 0 for n in applied) >= 2, applied  # the work was shared
    assert CLIENT  # the job belongs to the crash tests' client, in this test's own database


POISON_CHUNK = 3
RETRY_DELAY_S = 1.0


@pytest.mark.exclusive  # measures the gaps between deliveries
async def test_a_poison_chunk_gets_three_retries_a_ttl_apart_then_the_dead_letter_queue(
    db_dsn: str,
    tmp_path: Path,
    contacts: Contacts,
    prefix: str,
) -> None:
    """Catalog T10: chunk 3 fails on every delivery (a failpoint): each of its batches is
    delivered 4 times about one retry TTL apart, then recorded discarded (its valid rows count as
    `error`), and its message waits in the dead-letter queue; the job completes."""
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    async with job_env(db_dsn, tmp_path) as env:
        async with _running(env, logs, prefix, f"chunk:{POISON_CHUNK}=error") as workers:
            job_id = await _queued_job(env, contacts)
            await _finished(env, job_id)
        codes = [w.returncode for w in workers]
        assert codes == [0, 0], [_log_tail(log) for log in logs]
        job = await env.views.view_job(CLIENT, job_id)
        discarded = await fetch(
            db_dsn,
            "SELECT chunk_no, partition, rows_read, invalid, error, attempts FROM import_chunk"
            " WHERE job_id = $1 AND status = 'discarded' ORDER BY partition",
            job_id,
        )
    assert job.status is JobStatus.COMPLETED_WITH_PLACEHOLDERS
    assert job.counters.balanced
    assert job.counters.rows_read == contacts.rows
    assert [(r["chunk_no"], r["partition"]) for r in discarded] == [
        (POISON_CHUNK, p) for p in range(PARTITIONS)
    ]
    assert job.counters.error == sum(r["error"] for r in discarded) > 0
    assert all(r["error"] == r["rows_read"] - r["invalid"] for r in discarded)
    # Deliveries of each poison batch: the first and three retries, one TTL apart.
    events = sorted(
        (e for log in logs for e in _events(log) if e.get("chunk") == POISON_CHUNK),
        key=lambda e: str(e["timestamp"]),
    )
    for partition in range(PARTITIONS):
        tries = [
            dt.datetime.fromisoformat(str(e["timestamp"]))
            for e in events
            if e["partition"] == partition and e["event"] in ("chunk_retry", "chunk_dead_lettered")
        ]
        assert len(tries) == 4, events
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(tries)]
        assert all(RETRY_DELAY_S * 0.9 <= gap <= RETRY_DELAY_S + 1.5 for gap in gaps), gaps
    assert await _dead_letters(prefix) == PARTITIONS


async def test_a_given_up_chunk_reaches_the_dead_letter_queue_even_if_its_worker_dies_first(
    db_dsn: str,
    tmp_path: Path,
    contacts: Contacts,
    prefix: str,
) -> None:
    """The worker that gives the poison chunk up dies (`before_dead_letter=crash`) after
    recording it discarded and before sending its copy to the dead-letter queue: the broker
    redelivers the unacked message to the other worker, which finds the batch given up and
    dead-letters it; nothing is applied or counted twice, the job completes. The dying worker
    runs alone until it dies (two consumers from the start share the poison chunk's messages as
    the broker deals them: under load the other one may take both), then the other starts."""
    logs = [tmp_path / "dying.log", tmp_path / "other.log"]
    async with job_env(db_dsn, tmp_path) as env:
        poison = f"chunk:{POISON_CHUNK}=error"
        async with _running(env, logs[:1], prefix, f"{poison},before_dead_letter=crash") as workers:
            job_id = await _queued_job(env, contacts)
            await eventually(lambda: _logged(logs[0], "batch_discarded"), timeout_s=DEADLINE_S)
            assert await asyncio.wait_for(workers[0].wait(), WAIT_S) == CRASH_EXIT_CODE
            workers.append(await _worker(env, logs[1], prefix, failpoints=poison))
            await _finished(env, job_id)

            async def dead_lettered() -> int | None:
                count = await _dead_letters(prefix)
                return count if count >= PARTITIONS else None

            dead = await eventually(dead_lettered)
        codes = [w.returncode for w in workers]
        job = await env.views.view_job(CLIENT, job_id)
    assert codes == [CRASH_EXIT_CODE, 0], [_log_tail(log) for log in logs]
    assert dead == PARTITIONS  # each poison batch once: the dead worker's copy was never sent
    again = [e for e in _events(logs[1]) if e["event"] == "chunk_dead_lettered_again"]
    assert again  # the other worker sent the dead worker's copy
    assert job.status is JobStatus.COMPLETED_WITH_PLACEHOLDERS
    assert job.counters.balanced
    assert job.counters.rows_read == contacts.rows
    discarded = await fetch(
        db_dsn,
        "SELECT count(*) AS n, sum(error) AS e FROM import_chunk"
        " WHERE job_id = $1 AND status = 'discarded'",
        job_id,
    )
    assert discarded[0]["n"] == PARTITIONS  # recorded once each
    assert job.counters.error == discarded[0]["e"] > 0


async def _dead_letters(prefix: str) -> int:
    connection = await aio_pika.connect(RABBITMQ_URL)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(Topology.named(prefix).dead, passive=True)
        count = queue.declaration_result.message_count
        return int(count or 0)


RABBITMQCTL = "rabbitmqctl"


async def _rabbitmqctl(*args: str) -> None:
    process = await asyncio.create_subprocess_exec(
        RABBITMQCTL, *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err


async def _broker_up() -> bool | None:
    try:
        connection = await aio_pika.connect(RABBITMQ_URL, timeout=2)
    except Exception:
        return None
    await connection.close()
    return True


@pytest.mark.exclusive  # restarts the broker, or closes everyone's connections
@pytest.mark.parametrize("fault", ["restart", "close_connections"])
async def test_an_import_survives_a_broker_restart_and_dropped_connections(
    db_dsn: str, tmp_path: Path, contacts: Contacts, prefix: str, fault: str
) -> None:
    """Catalog T05: the broker stops and starts at ~30% of an import (or every connection is
    closed three times); publishers re-send what was not confirmed, consumers reconnect, the
    durable queues keep their messages; the result is the undisturbed one."""
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    async with job_env(db_dsn, tmp_path) as env:
        # Slowed after each batch so that the fault lands mid-import.
        pause = "after_commit=sleep:500" if fault == "restart" else "after_commit=sleep:200"
        async with _running(env, logs, prefix, pause) as workers:
            job_id = await _queued_job(env, contacts)

            async def progressed() -> bool | None:
                done = await ledger_chunks(db_dsn, job_id)
                return True if done >= 8 else None

            await eventually(progressed)
            assert not await _is_terminal(env, job_id)  # the fault comes mid-import
            try:
                if fault == "restart":
                    await _rabbitmqctl("stop_app")
                    await asyncio.sleep(2)
                else:
                    for _ in range(3):
                        await _rabbitmqctl("close_all_connections", "test: T05")
                        await asyncio.sleep(0.3)
            finally:
                if fault == "restart":
                    await _rabbitmqctl("start_app")
                await eventually(_broker_up, timeout_s=60)
            await _finished(env, job_id)
        codes = [w.returncode for w in workers]
    assert codes == [0, 0], [_log_tail(log) for log in logs]
    await _assert_invariants(db_dsn, job_id, contacts)


READ_AT_KILL = 0.3  # the share of the file read when the coordinator is killed (T04)


async def test_the_coordinator_killed_at_30_percent_read_is_resumed_from_its_checkpoint(
    db_dsn: str, tmp_path: Path, contacts: Contacts, prefix: str
) -> None:
    """Catalog T04: the process reading and publishing the file (the lease holder) gets
    `kill -9` once 30% of the file is read; the other worker keeps applying what was published,
    claims the job when the lease expires and resumes reading from the last checkpoint (not from
    the start); chunks published twice are applied once (lanes); the killed process is restarted
    and joins. The result is the undisturbed one (I1-I6)."""
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    size = contacts.path.stat().st_size
    async with job_env(db_dsn, tmp_path) as env:
        async with _running(env, logs, prefix, "after_commit=sleep:100") as workers:
            job_id = await _queued_job(env, contacts)

            async def coordinator() -> int | None:
                claimed = [await _logged(log, "job_claimed") for log in logs]
                return claimed.index(True) if True in claimed else None

            killed = await eventually(coordinator)

            async def read_enough() -> int | None:
                rows = await fetch(
                    db_dsn,
                    "SELECT max(end_offset) AS o FROM import_chunk WHERE job_id = $1",
                    job_id,
                )
                offset = rows[0]["o"]
                return offset if offset is not None and offset >= READ_AT_KILL * size else None

            read_at_kill = await eventually(read_enough)
            workers[killed].send_signal(signal.SIGKILL)
            assert await asyncio.wait_for(workers[killed].wait(), WAIT_S) == -signal.SIGKILL
            assert not await _is_terminal(env, job_id)
            restarted = tmp_path / "restarted.log"
            workers[killed] = await _worker(env, restarted, prefix)
            await _finished(env, job_id)
        codes = [w.returncode for w in workers]
    assert codes == [0, 0], [_log_tail(log) for log in logs]
    await _assert_invariants(db_dsn, job_id, contacts)
    survivors = [logs[1 - killed], restarted]
    resumed = [e for log in survivors for e in _events(log) if e["event"] == "import_resumed"]
    assert len(resumed) == 1, resumed  # one new coordinator, from the checkpoint
    # Not from the start (the other worker may have applied more published chunks before it
    # took the lease over, so the checkpoint can lie past the offset seen at the kill).
    assert 0 < int(str(resumed[0]["offset"])) < size
    assert read_at_kill < size


@pytest.mark.exclusive  # restarts the broker
async def test_a_chunk_waiting_in_the_retry_queue_survives_a_broker_restart(
    db_dsn: str, tmp_path: Path, contacts: Contacts, prefix: str
) -> None:
    """Catalog T34: a batch fails once and waits in the retry queue (TTL 4 s); the broker is
    restarted meanwhile; the message is still there afterwards (durable quorum queue, persistent
    message) and is applied on its retry: nothing lost, nothing counted as error."""
    log = tmp_path / "worker.log"
    async with job_env(db_dsn, tmp_path) as env:
        async with _running(
            env, [log], prefix, "chunk:3=error@1", retry_delay_ms="4000"
        ) as workers:
            job_id = await _queued_job(env, contacts)
            await eventually(lambda: _logged(log, "chunk_retry"))
            try:
                await _rabbitmqctl("stop_app")
                await asyncio.sleep(0.5)
            finally:
                await _rabbitmqctl("start_app")
                await eventually(_broker_up, timeout_s=60)
            await _finished(env, job_id)
        code = workers[0].returncode
        job = await env.views.view_job(CLIENT, job_id)
    assert code == 0, _log_tail(log)
    assert job.counters.error == 0
    await _assert_invariants(db_dsn, job_id, contacts)


@pytest.mark.exclusive  # raises the broker's memory alarm for everyone
async def test_a_memory_alarm_stalls_publishing_and_nothing_is_lost(
    db_dsn: str, tmp_path: Path, contacts: Contacts, prefix: str
) -> None:
    """Catalog T06: the broker raises its memory alarm mid-import (it blocks every publishing
    connection) for 8 s, then clears it: the coordinator stalls (flow control) instead of
    dropping or skipping chunks, and the import ends as an undisturbed one (I1-I4, I6)."""
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    async with job_env(db_dsn, tmp_path) as env:
        async with _running(env, logs, prefix, "after_commit=sleep:200") as workers:
            job_id = await _queued_job(env, contacts)

            async def progressed() -> bool | None:
                return True if await ledger_chunks(db_dsn, job_id) >= 4 else None

            await eventually(progressed)
            assert not await _is_terminal(env, job_id)
            try:
                await _rabbitmqctl("set_vm_memory_high_watermark", "0.0001")
                await asyncio.sleep(8)  # ~2 s of work was left: only a stall keeps it unfinished
                assert not await _is_terminal(env, job_id)
            finally:
                await _rabbitmqctl("set_vm_memory_high_watermark", "0.4")
            await _finished(env, job_id)
        codes = [w.returncode for w in workers]
    assert codes == [0, 0], [_log_tail(log) for log in logs]
    await _assert_invariants(db_dsn, job_id, contacts)


async def test_garbage_on_the_chunk_queue_goes_to_the_dead_letter_queue_at_once(
    db_dsn: str, tmp_path: Path, contacts: Contacts, prefix: str
) -> None:
    """Catalog T26, in the middle of the catalog import on two workers: garbage bytes, valid JSON
    missing fields, an unknown message version and a batch of an unknown import, published
    straight to the main queue. Each is dead-lettered on its first delivery (never retried), the
    workers keep running, the stray batch writes nothing, and the import ends as an undisturbed
    one (I1-I6)."""
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    topology = Topology.named(prefix)
    stray_job = uuid.uuid4()
    stray = codec.encode(
        stray_job, "nobody", Batch(0, 0, 2, 10, (ContactRow(2, "52998224725", "X", None),))
    )
    bodies = [
        b"\x00\xffgarbage",
        b'{"v": 1, "job": "x"}',
        b'{"v": 99}',
        stray,
    ]
    async with (
        job_env(db_dsn, tmp_path) as env,
        _running(env, logs, prefix, "after_commit=sleep:100") as workers,
    ):
        job_id = await _queued_job(env, contacts)
        await eventually(lambda: _at_least(db_dsn, job_id, 4))  # the import is under way
        connection = await aio_pika.connect(RABBITMQ_URL)
        async with connection:
            channel = await connection.channel()
            for i, body in enumerate(bodies):
                await channel.default_exchange.publish(
                    aio_pika.Message(body, message_id=f"junk-{i}"), routing_key=topology.main
                )

        async def all_dead() -> bool | None:
            return True if await _dead_letters(prefix) == len(bodies) else None

        await eventually(all_dead, timeout_s=30)
        assert not await _is_terminal(env, job_id)  # the garbage met a running import
        assert all(w.returncode is None for w in workers)  # still running
        await _finished(env, job_id)
    assert [w.returncode for w in workers] == [0, 0], [_log_tail(log) for log in logs]
    events = [e for log in logs for e in _events(log)]
    routed = ("chunk_message_malformed", "chunk_message_unknown_import")
    junk = [e for e in events if e["event"] in routed]
    assert len(junk) == len(bodies), junk  # each dead-lettered once
    assert all(e["attempts"] == 1 for e in junk)  # on its first delivery
    assert not [e for e in events if e["event"] == "chunk_retry"]  # nothing retried
    assert await _dead_letters(prefix) == len(bodies)  # none of the import's batches
    assert not await fetch(db_dsn, "SELECT 1 FROM import_chunk WHERE job_id = $1", stray_job)
    await _assert_invariants(db_dsn, job_id, contacts)


async def _at_least(dsn: str, job_id: uuid.UUID, batches: int) -> bool | None:
    return True if await ledger_chunks(dsn, job_id) >= batches else None


@pytest.mark.slow  # the broker looks at delivery timeouts about once a minute
async def test_a_chunk_outliving_the_consumer_timeout_is_counted_once(
    db_dsn: str, tmp_path: Path, contacts: Contacts, prefix: str
) -> None:
    """Catalog T31: the broker's delivery-ack timeout set to 5 s, one chunk taking 75 s: the
    broker closes the channel and redelivers; the consumer's channel comes back (robust), the
    redelivered copy finds its lane passed (a no-op), no redelivery storm, the chunk counted
    once, the result the undisturbed one."""
    log = tmp_path / "worker.log"
    await _rabbitmqctl("eval", "application:set_env(rabbit, consumer_timeout, 5000).")
    try:
        async with job_env(db_dsn, tmp_path) as env:
            async with _running(env, [log], prefix, "chunk:3=sleep:75000@1") as workers:
                job_id = await _queued_job(env, contacts)
                await _finished(env, job_id)
            code = workers[0].returncode
    finally:
        await _rabbitmqctl("eval", "application:set_env(rabbit, consumer_timeout, 1800000).")
    assert code == 0, _log_tail(log)
    events = _events(log)
    repeated = [e for e in events if e["event"] == "chunk_applied" and e.get("repeated")]
    unfinished = [e for e in events if e["event"] == "chunk_delivery_unfinished"]
    assert unfinished or repeated  # the broker did time the delivery out
    assert len(repeated) <= 2 * PARTITIONS  # redelivered copies: no-ops, and no storm
    await _assert_invariants(db_dsn, job_id, contacts)
