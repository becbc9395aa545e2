"""The Redis accelerator against a real redis-server of the test's own: a real import's hints
reach a subscriber (and the SSE hub's watchers), the rate limit counts and fails open, and the
hub notices Redis going away and coming back."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from importer import wiring
from importer.adapters.redis import RedisAccelerator, RedisRateLimiter
from importer.adapters.storage.local import LocalObjectStore
from importer.core.accelerator import ProgressHint, decode_hint, progress_channel
from importer.core.models import JobStatus
from importer.metrics import PipelineMetrics
from importer.services.worker import Worker
from importer.settings import Settings
from tests.jobs_support import WAIT_S, Env, contacts_csv, eventually, job_env, upload_job
from tests.redis_support import RedisServer, redis_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path) as server:
        yield server


@pytest.fixture
async def env(db_dsn: str, tmp_path: Path) -> AsyncIterator[Env]:
    async with job_env(db_dsn, tmp_path) as opened:
        yield opened


async def _hints(pubsub: aioredis.client.PubSub, until_event: str) -> list[ProgressHint]:
    hints: list[ProgressHint] = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
        if message is None:
            continue
        hint = decode_hint(message["data"])
        assert hint is not None
        hints.append(hint)
        if hint.event == until_event:
            return hints
    pytest.fail(f"no {until_event!r} hint within {WAIT_S} s: {hints}")


async def test_a_real_import_s_hints_reach_a_subscriber_and_the_hub_s_watchers(
    env: Env, redis: RedisServer, client_ids: Iterator[int], tmp_path: Path
) -> None:
    client = next(client_ids)
    path = contacts_csv(tmp_path / "contacts.csv", 60)
    job_id = await upload_job(env, client, path, chunk_size=7, partitions=2)
    await env.views.start_job(client, job_id, "op-1")
    accelerator = RedisAccelerator.from_url(redis.url, rate_limit_per_minute=10)
    subscriber = aioredis.Redis.from_url(redis.url)
    pubsub = subscriber.pubsub()
    try:
        await pubsub.subscribe(progress_channel(job_id))
        accelerator.hub.start()
        await eventually(lambda: _true_if(accelerator.hub.live))
        async with accelerator.hub.watch(job_id) as watch:
            watch.changed.clear()  # the hub's going live woke it
            worker = Worker(
                env.store,
                env.objects,
                Settings(database_url=env.dsn, worker_poll_seconds=0.05),
                owner=f"w-{uuid.uuid4().hex[:6]}",
                stop=asyncio.Event(),
                burst=True,
                observer=wiring.hinting(PipelineMetrics(), accelerator),
                local_files=LocalObjectStore,
            )
            await asyncio.wait_for(worker.run(), WAIT_S)
            await accelerator.publisher.aclose()  # the publishes in flight have landed
            hints = await _hints(pubsub, until_event="finished")
            await asyncio.wait_for(watch.changed.wait(), WAIT_S)
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await subscriber.aclose()
        await accelerator.aclose()
    batches = [h for h in hints if h.event == "batch"]
    assert batches
    assert all(h.job_id == job_id for h in hints)
    assert sum(h.rows for h in batches) == 60  # one hint per committed batch (advisory data)
    assert (await env.views.view_job(client, job_id)).status is (
        JobStatus.COMPLETED_WITH_PLACEHOLDERS
    )


async def test_the_rate_limit_counts_per_client_and_fails_open(redis: RedisServer) -> None:
    client = aioredis.Redis.from_url(redis.url)
    # A generous timeout here: this test is about counting, not the 50 ms budget.
    limiter = RedisRateLimiter(client, per_minute=3, timeout_s=2.0)
    try:
        if time.time() % 60 > 55:  # the fixed window must not roll over mid-test
            await asyncio.sleep(60 - time.time() % 60 + 0.1)
        decisions = [await limiter.admit(1) for _ in range(5)]
        assert [d.allowed for d in decisions] == [True, True, True, False, False]
        assert 1 <= decisions[-1].retry_after_s <= 60
        assert (await limiter.admit(2)).allowed  # another client has its own counter
        redis.kill()
        started = time.monotonic()
        assert (await limiter.admit(1)).allowed  # Redis away: the request goes through
        assert (await limiter.admit(1)).allowed  # (and is not even asked, for a while)
        assert time.monotonic() - started < 1.0
    finally:
        await client.aclose()


async def test_the_hub_falls_back_when_redis_goes_and_resubscribes_when_it_is_back(
    redis: RedisServer,
) -> None:
    accelerator = RedisAccelerator.from_url(redis.url, rate_limit_per_minute=10)
    job_id = uuid.uuid4()
    try:
        accelerator.hub.start()
        await eventually(lambda: _true_if(accelerator.hub.live))
        async with accelerator.hub.watch(job_id) as watch:
            watch.changed.clear()
            redis.kill()
            await asyncio.wait_for(watch.changed.wait(), WAIT_S)  # woken: poll from now on
            await eventually(lambda: _true_if(not watch.live))
            accelerator.offer_hint(ProgressHint(job_id, "batch", 1))  # dropped, never raised
            await accelerator.publisher.aclose()
            assert accelerator.publisher.dropped >= 1
            redis.start()
            await eventually(lambda: _true_if(watch.live))
            watch.changed.clear()

            async def hinted() -> bool | None:  # the publisher may still be cooling down
                accelerator.offer_hint(ProgressHint(job_id, "batch", 1))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(watch.changed.wait(), 0.2)
                return True if watch.changed.is_set() else None

            await eventually(hinted)
    finally:
        await accelerator.aclose()


async def _true_if(condition: bool) -> bool | None:
    return True if condition else None
