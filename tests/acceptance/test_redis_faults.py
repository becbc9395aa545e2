"""Catalog T09: Redis down for a whole import, then Redis killed at ~50% and restarted.

Redis is only an accelerator (progress hints, the creation rate limit; no locks): both imports
end exactly as an undisturbed one (I1-I6, one finalization row and one notification). The
first run is `importer serve` with Redis shut down before it starts; the second is `importer
worker`, whose hints a subscriber sees until Redis is killed at half the batches.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import pytest
import redis.asyncio as aioredis

from importer.core.accelerator import PROGRESS_PATTERN
from tests.acceptance.conftest import CHUNK_SIZE, ROWS, Contacts
from tests.acceptance.invariants import Imported, assert_invariants, other_clients_digest
from tests.conftest import _free_loopback_port
from tests.jobs_support import Env, eventually, job_env, ledger_chunks, upload_job
from tests.redis_support import RedisServer, redis_server
from tests.support import fetch

pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(240)]

PARTITIONS = 2
BATCHES = -(-ROWS // CHUNK_SIZE) * PARTITIONS  # at least: one batch per chunk and partition
DEADLINE_S = ROWS / 1000 + 60  # the catalog's bound for chaos tests
STOP_S = 30.0


@pytest.fixture(scope="module")
def imported(contacts: Contacts) -> Imported:
    """The session's catalog file (one undisturbed reference for every fault test of it)."""
    assert contacts.rows == ROWS
    return Imported(contacts.path, contacts.stats)


@pytest.fixture
async def env(db_dsn: str, tmp_path: Path) -> AsyncIterator[Env]:
    async with job_env(db_dsn, tmp_path) as opened:
        yield opened


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    directory = tmp_path / "redis"
    directory.mkdir()
    with redis_server(directory) as server:
        yield server


async def _queued_job(env: Env, imported: Imported, client: int) -> uuid.UUID:
    job_id = await upload_job(
        env, client, imported.path, chunk_size=CHUNK_SIZE, partitions=PARTITIONS
    )
    await env.views.start_job(client, job_id, "op-1")
    return job_id


def _environ(env: Env, tmp_path: Path, redis: RedisServer) -> dict[str, str]:
    environ = {
        **os.environ,
        "DATABASE_URL": env.dsn,
        "IMPORTER_STORAGE_DIR": str(tmp_path / "objects"),  # job_env's store
        "IMPORTER_CONCURRENCY": str(PARTITIONS),
        "IMPORTER_LOG_FORMAT": "json",
        "IMPORTER_LOG_LEVEL": "info",
        "REDIS_URL": redis.url,
    }
    environ.pop("S3_ENDPOINT_URL", None)
    return environ


async def _start(
    command: list[str], environ: dict[str, str], log: Path
) -> asyncio.subprocess.Process:
    with log.open("ab") as out:  # the child keeps its own descriptor
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "importer", *command, env=environ, stdout=out, stderr=out
        )


async def _stop(process: asyncio.subprocess.Process) -> None:
    process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(process.wait(), STOP_S) == 0


async def _terminal(env: Env, job_id: uuid.UUID) -> bool | None:
    rows = await fetch(env.dsn, "SELECT status FROM import_job WHERE id = $1", job_id)
    return True if rows[0]["status"] in ("completed", "completed_with_placeholders") else None


def _warnings(log: Path, event: str) -> int:
    lines = [orjson.loads(x) for x in log.read_bytes().splitlines() if x.startswith(b"{")]
    return sum(line["event"] == event for line in lines)


async def _check(env: Env, job_id: uuid.UUID, imported: Imported, client: int, others: str) -> None:
    await assert_invariants(
        env.dsn,
        job_id,
        imported,
        client=client,
        reference_client=client + 1,
        others_before=others,
    )


async def test_an_import_with_redis_down_throughout_ends_as_an_undisturbed_one(
    env: Env, imported: Imported, redis: RedisServer, tmp_path: Path
) -> None:
    client = 61
    redis.shutdown()  # `redis-cli shutdown nosave` before the start
    others = await other_clients_digest(env.dsn, client)
    job_id = await _queued_job(env, imported, client)
    environ = _environ(env, tmp_path, redis) | {"JWT_SECRET": "t09-" + "x" * 32}
    port = str(_free_loopback_port())
    log = tmp_path / "serve.log"
    server = await _start(["serve", "--host", "127.0.0.1", "--port", port], environ, log)
    try:
        await eventually(lambda: _terminal(env, job_id), timeout_s=DEADLINE_S)
    finally:
        await _stop(server)
    await _check(env, job_id, imported, client, others)
    assert _warnings(log, "redis_publish_failed") <= 1  # said once, not per batch


async def test_an_import_with_redis_killed_at_half_and_restarted_ends_as_an_undisturbed_one(
    env: Env, imported: Imported, redis: RedisServer, tmp_path: Path
) -> None:
    client = 63
    others = await other_clients_digest(env.dsn, client)
    job_id = await _queued_job(env, imported, client)
    subscriber = aioredis.Redis.from_url(redis.url)
    pubsub = subscriber.pubsub()
    await pubsub.psubscribe(PROGRESS_PATTERN)
    log = tmp_path / "worker.log"
    worker = await _start(["worker"], _environ(env, tmp_path, redis), log)
    try:

        async def half_done() -> bool | None:
            return True if await ledger_chunks(env.dsn, job_id) >= BATCHES // 2 else None

        await eventually(half_done, timeout_s=DEADLINE_S)
        assert await _hinted(pubsub)  # Redis is in use
        redis.kill()
        assert not await _terminal(env, job_id), "the import ended before the kill: make it longer"

        async def more_done() -> bool | None:
            done = await ledger_chunks(env.dsn, job_id) >= BATCHES * 3 // 4
            return True if done or await _terminal(env, job_id) else None

        await eventually(more_done, timeout_s=DEADLINE_S)
        redis.start()
        await eventually(lambda: _terminal(env, job_id), timeout_s=DEADLINE_S)
    finally:
        await _stop(worker)
        await subscriber.aclose()
    await _check(env, job_id, imported, client, others)
    assert _warnings(log, "redis_publish_failed") <= 1


async def _hinted(pubsub: aioredis.client.PubSub) -> bool:
    """A hint has arrived (the subscription's confirmation is skipped); bounded."""
    async with asyncio.timeout(10):
        while True:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if message is not None and message["type"] == "pmessage":
                return True
