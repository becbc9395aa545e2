"""The jobs side of the store on the real PostgreSQL: start, cancel, upload confirmation, views,
history, claims, leases and the LISTEN wake-up."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import JOBS_CHANNEL, PostgresJobQueue
from importer.adapters.postgres.views import PostgresJobViews
from importer.core.errors import (
    IllegalTransitionError,
    ImportAlreadyAppliedError,
    JobNotFoundError,
    JobNotReadyError,
)
from importer.core.models import Job, JobStatus, NewJob
from importer.sql import queries
from tests.jobs_support import (
    Env,
    as_tuple,
    bare_job,
    eventually,
    job_env,
    notification_type,
)
from tests.support import fetch, finalization_counts

pytestmark = pytest.mark.integration

LEASE_S = 30.0


@pytest.fixture
async def env(db_dsn: str, tmp_path: Path) -> AsyncIterator[Env]:
    async with job_env(db_dsn, tmp_path) as opened:
        yield opened


@pytest.fixture
def client(client_ids: Iterator[int]) -> int:
    return next(client_ids)


# --- start ------------------------------------------------------------------------------------


async def test_start_queues_once_records_the_operation_and_guards_the_gate(
    env: Env, client: int
) -> None:
    store, views = env.store, env.views
    uploading = await bare_job(env, client, JobStatus.UPLOADING)
    with pytest.raises(JobNotReadyError, match="has not been uploaded yet"):
        await views.start_job(client, uploading, "op-0")

    job_id = await bare_job(env, client, JobStatus.UPLOADED)
    first = await views.start_job(client, job_id, "op-1")
    assert (first.status, first.last_operation_id) == (JobStatus.QUEUED, "op-1")
    again = await views.start_job(client, job_id, "op-2")  # idempotent: stays queued
    assert (again.status, again.last_operation_id) == (JobStatus.QUEUED, "op-2")
    anonymous = await views.start_job(client, job_id, None)
    assert anonymous.last_operation_id == "op-2"

    claimed = await store.claim_job("w1", LEASE_S, 2)
    assert claimed is not None
    assert claimed.id == job_id
    await store.transition(job_id, JobStatus.NORMALIZING, owner="w1")
    with pytest.raises(ImportAlreadyAppliedError, match="cannot be applied again"):
        await views.start_job(client, job_id, "op-3")
    await store.transition(job_id, JobStatus.IMPORTING, owner="w1")
    with pytest.raises(ImportAlreadyAppliedError):
        await views.start_job(client, job_id, "op-4")
    assert (await views.view_job(client, job_id)).last_operation_id == "op-2"

    cancelled = await bare_job(env, client, JobStatus.UPLOADED)
    await views.request_cancel(client, cancelled)
    with pytest.raises(ImportAlreadyAppliedError):
        await views.start_job(client, cancelled, "op-5")


async def test_twenty_concurrent_starts_make_exactly_one_transition(env: Env, client: int) -> None:
    job_id = await bare_job(env, client, JobStatus.UPLOADED)
    listener = await asyncpg.connect(env.dsn)
    notified: list[str] = []
    await listener.add_listener(JOBS_CHANNEL, lambda *n: notified.append(str(n[-1])))
    pools = [await connect_pool(env.dsn, 5) for _ in range(4)]
    try:
        apis = [PostgresJobViews(pool) for pool in pools]
        views = await asyncio.gather(
            *(apis[i % 4].start_job(client, job_id, f"op-{i}") for i in range(20))
        )
        assert {v.status for v in views} == {JobStatus.QUEUED}
        await listener.fetchval("SELECT 1")  # notifications committed before it arrive first
        await asyncio.sleep(0)  # let asyncpg run the listener callbacks it scheduled
        assert notified == [str(job_id)]  # one transition, one wake-up
        final = await env.views.view_job(client, job_id)
        assert final.last_operation_id in {f"op-{i}" for i in range(20)}
    finally:
        for pool in pools:
            await pool.close()
        await listener.close()


# --- upload confirmation and cancel ----------------------------------------------------------


async def test_mark_uploaded_moves_or_fails_the_job_once(env: Env, client: int) -> None:
    views = env.views
    ok = await bare_job(env, client, JobStatus.UPLOADING)
    view = await views.mark_uploaded(client, ok, ok=True, fail_reason=None)
    assert view.status is JobStatus.UPLOADED
    assert (await views.mark_uploaded(client, ok, ok=True, fail_reason=None)).status is (
        JobStatus.UPLOADED
    )  # a repeat changes nothing

    bad = await bare_job(env, client, JobStatus.UPLOADING)
    failed = await views.mark_uploaded(client, bad, ok=False, fail_reason="checksum_mismatch")
    assert (failed.status, failed.fail_reason) == (JobStatus.FAILED, "checksum_mismatch")
    assert failed.finished_at is not None
    again = await views.mark_uploaded(client, bad, ok=False, fail_reason="checksum_mismatch")
    assert again.status is JobStatus.FAILED
    assert await finalization_counts(env.dsn, bad) == (1, 1)
    assert await notification_type(env.dsn, bad) == "import_failed"
    with pytest.raises(IllegalTransitionError):
        await views.mark_uploaded(client, bad, ok=True, fail_reason=None)


async def _link_firing_and_journey(dsn: str, client: int, job_id: uuid.UUID) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        journey = await conn.fetchval(
            "INSERT INTO journey (client_id, name) VALUES ($1, 'j') RETURNING id", client
        )
        await conn.execute(
            "INSERT INTO journey_classification_contact"
            " (journey_id, client_id, import_job_id, status, auto_start_journey_mailing)"
            " VALUES ($1, $2, $3, 'AWAITING_IMPORT', true)",
            journey,
            client,
            job_id,
        )
        await conn.execute(
            "INSERT INTO firing_intent (client_id, kind, import_job_id) VALUES ($1, 'hsm', $2)",
            client,
            job_id,
        )
    finally:
        await conn.close()


@pytest.mark.parametrize("status", [JobStatus.UPLOADING, JobStatus.UPLOADED, JobStatus.QUEUED])
async def test_cancel_before_any_run_is_immediate_with_zero_counters(
    env: Env, client: int, status: JobStatus
) -> None:
    job_id = await bare_job(env, client, status)
    await _link_firing_and_journey(env.dsn, client, job_id)
    view = await env.views.request_cancel(client, job_id)
    assert view.status is JobStatus.CANCELLED
    assert as_tuple(view.counters) == (0, 0, 0, 0, 0, 0)
    assert view.finished_at is not None
    assert (await env.views.request_cancel(client, job_id)).status is JobStatus.CANCELLED
    assert await finalization_counts(env.dsn, job_id) == (1, 1)
    assert await notification_type(env.dsn, job_id) == "import_cancelled"
    intents = await fetch(
        env.dsn, "SELECT released_at FROM firing_intent WHERE import_job_id = $1", job_id
    )
    assert [i["released_at"] for i in intents] == [None]  # never released for a cancel
    journey = await fetch(
        env.dsn,
        "SELECT status FROM journey_classification_contact WHERE import_job_id = $1",
        job_id,
    )
    assert journey[0]["status"] == "AWAITING_IMPORT"
    outbox = await fetch(env.dsn, "SELECT topic FROM outbox WHERE topic <> 'notification'")
    assert outbox == []
    assert await env.store.claim_job("w1", LEASE_S, 2) is None


async def test_cancel_of_a_claimed_job_is_requested_not_applied(env: Env, client: int) -> None:
    job_id = await bare_job(env, client, JobStatus.UPLOADED)
    await env.views.start_job(client, job_id, "op")
    claimed = await env.store.claim_job("w1", LEASE_S, 2)
    assert claimed is not None
    assert not claimed.cancel_requested
    view = await env.views.request_cancel(client, job_id)
    assert (view.status, view.cancel_requested) == (JobStatus.QUEUED, True)
    lease = await env.store.renew_lease(job_id, "w1", LEASE_S)
    assert (lease.held, lease.cancel_requested) == (True, True)
    await env.store.release_lease(job_id, "w1")
    reclaimed = await env.store.claim_job("w2", LEASE_S, 2)
    assert reclaimed is not None
    assert reclaimed.cancel_requested  # the next owner finalizes it without running it
    done = await env.store.finalize(job_id, None, cancelled=True, owner="w2")
    assert done is not None
    assert done.status is JobStatus.CANCELLED
    assert await finalization_counts(env.dsn, job_id) == (1, 1)


# --- views and history ------------------------------------------------------------------------


async def test_view_shows_the_stored_job(env: Env, client: int) -> None:
    job_id = uuid.uuid4()
    await env.store.create_job(
        NewJob(
            id=job_id,
            client_id=client,
            user_id="ana",
            source=f"{client}/k/list.csv.gz",
            input_format="csv",
            strategy="discard",
            chunk_size=100,
            partitions=2,
            bytes_total=123,
            source_size=123,
            source_sha256="ab" * 32,
            filename="list.csv.gz",
            has_sensitive_data=True,
            data_processing_purpose="marketing",
            lgpd_processing_hypothesis=3,
            tags=["a", "b"],
            kind="hsm",
            has_internationalization=True,
            layout={"delimiter": ";"},
        ),
        JobStatus.UPLOADING,
    )
    view = await env.views.view_job(client, job_id)
    assert (view.user_id, view.status, view.filename) == ("ana", JobStatus.UPLOADING, "list.csv.gz")
    assert (view.source, view.source_size, view.source_sha256) == (
        f"{client}/k/list.csv.gz",
        123,
        "ab" * 32,
    )
    assert (view.rows_done, view.bytes_read, view.bytes_total) == (0, 0, 123)
    assert view.tags == ("a", "b")
    assert not view.cancel_requested
    assert view.started_at is None
    assert view.created_at.tzinfo is not None
    job = await env.store.get_job(job_id)
    assert (job.layout, job.has_internationalization) == ({"delimiter": ";"}, True)
    assert (job.source_size, job.source_sha256, job.filename) == (123, "ab" * 32, "list.csv.gz")
    stored = await fetch(
        env.dsn,
        "SELECT kind, has_sensitive_data, data_processing_purpose, lgpd_processing_hypothesis"
        " FROM import_job WHERE id = $1",
        job_id,
    )
    assert tuple(stored[0]) == ("hsm", True, "marketing", 3)


async def test_history_is_newest_first_paged_filtered_and_tenant_bound(
    env: Env, client_ids: Iterator[int]
) -> None:
    mine, theirs = next(client_ids), next(client_ids)
    created = [
        await bare_job(env, mine, status, user_id=user)
        for status, user in [
            (JobStatus.UPLOADED, "ana"),
            (JobStatus.UPLOADING, "bia"),
            (JobStatus.UPLOADED, "ana"),
            (JobStatus.UPLOADED, "bia"),
            (JobStatus.UPLOADING, "ana"),
        ]
    ]
    await bare_job(env, theirs, JobStatus.UPLOADED, user_id="ana")
    newest_first = list(reversed(created))

    async def page(
        before: tuple[dt.datetime, uuid.UUID] | None,
        user: str | None = None,
        statuses: list[JobStatus] | None = None,
    ) -> list[uuid.UUID]:
        views = await env.views.list_jobs(
            mine, user_id=user, statuses=statuses, before=before, limit=2
        )
        return [v.id for v in views]

    everything = await env.views.list_jobs(
        mine, user_id=None, statuses=None, before=None, limit=100
    )
    assert [v.id for v in everything] == newest_first
    assert {v.client_id for v in everything} == {mine}
    pages, cursor = [], None
    while ids := await page(cursor):
        pages.append(ids)
        last = next(v for v in everything if v.id == ids[-1])
        cursor = (last.created_at, last.id)
    assert pages == [newest_first[0:2], newest_first[2:4], newest_first[4:]]
    assert await page(None, user="ana") == [created[4], created[2]]
    assert await page(None, user="nobody") == []
    uploading = await page(None, statuses=[JobStatus.UPLOADING])
    assert uploading == [created[4], created[1]]
    assert await page(None, user="bia", statuses=[JobStatus.UPLOADED]) == [created[3]]


@pytest.mark.parametrize(
    ("query", "index"),
    [
        ("list_jobs", "import_job_client_history_idx"),
        ("list_user_jobs", "import_job_user_history_idx"),
    ],
)
async def test_history_pages_are_read_through_an_index(env: Env, query: str, index: str) -> None:
    args: list[object] = [1, dt.datetime.now(dt.UTC), uuid.uuid4(), None, 20]
    if query == "list_user_jobs":
        args.append("ana")
    conn = await asyncpg.connect(env.dsn)
    try:
        await conn.execute("SET enable_seqscan = off")  # an empty table: plan as if it were big
        plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN {queries()[query]}", *args))
    finally:
        await conn.close()
    assert f"Index Scan Backward using {index}" in plan, plan
    assert "Sort" not in plan.split("Index Scan Backward")[0], plan  # the index gives the order


async def test_another_clients_job_is_not_found_everywhere(
    env: Env, client_ids: Iterator[int]
) -> None:
    owner, stranger = next(client_ids), next(client_ids)
    job_id = await bare_job(env, owner, JobStatus.UPLOADING)
    views = env.views
    for attempt in (
        views.view_job(stranger, job_id),
        views.start_job(stranger, job_id, "op"),
        views.request_cancel(stranger, job_id),
        views.mark_uploaded(stranger, job_id, ok=True, fail_reason=None),
        views.mark_uploaded(stranger, job_id, ok=False, fail_reason="checksum_mismatch"),
        views.view_job(owner, uuid.uuid4()),
    ):
        with pytest.raises(JobNotFoundError):
            await attempt
    assert await views.list_jobs(stranger, user_id=None, statuses=None, before=None, limit=9) == []
    view = await views.view_job(owner, job_id)
    assert (view.status, view.cancel_requested) == (JobStatus.UPLOADING, False)


# --- claims and leases ------------------------------------------------------------------------


async def _queued(env: Env, client: int) -> uuid.UUID:
    job_id = await bare_job(env, client, JobStatus.UPLOADED)
    await env.views.start_job(client, job_id, None)
    return job_id


@pytest.mark.parametrize("jobs", [1, 2])
async def test_racing_workers_never_claim_the_same_job(
    env: Env, client_ids: Iterator[int], jobs: int
) -> None:
    queued = {await _queued(env, next(client_ids)) for _ in range(jobs)}
    pools = [await connect_pool(env.dsn, 2) for _ in range(6)]
    try:
        claims = await asyncio.gather(
            *(PostgresJobQueue(pool).claim_job(f"w{i}", LEASE_S, 2) for i, pool in enumerate(pools))
        )
    finally:
        for pool in pools:
            await pool.close()
    won = [job for job in claims if job is not None]
    assert len(won) == jobs
    assert {job.id for job in won} == queued
    assert len({job.lease_owner for job in won}) == jobs


async def test_a_client_at_its_share_waits_while_another_client_runs(
    env: Env, client_ids: Iterator[int]
) -> None:
    busy, other = next(client_ids), next(client_ids)
    first, second = await _queued(env, busy), await _queued(env, busy)
    third = await _queued(env, other)  # newest
    claim = env.store.claim_job
    assert (job := await claim("w1", LEASE_S, 1)) is not None
    assert job.id == first
    assert (job := await claim("w2", LEASE_S, 1)) is not None
    assert job.id == third  # `busy` holds its one live lease: its second job waits
    assert await claim("w3", LEASE_S, 1) is None
    await env.store.release_lease(first, "w1")  # a finished (or stopped) run frees the slot
    assert (job := await claim("w3", LEASE_S, 1)) is not None
    assert job.id == first  # the oldest again: released, not terminal
    assert (job := await claim("w4", LEASE_S, 2)) is not None
    assert job.id == second  # a larger share admits the second


async def test_leases_renew_release_and_expire(env: Env, client: int) -> None:
    job_id = await _queued(env, client)
    store = env.store
    assert await store.claim_job("w1", LEASE_S, 2) is not None
    assert await store.claim_job("w2", LEASE_S, 2) is None  # live lease
    assert (await store.renew_lease(job_id, "w1", LEASE_S)).held
    assert not (await store.renew_lease(job_id, "w2", LEASE_S)).held
    await store.release_lease(job_id, "w2")  # not its lease: nothing happens
    assert await store.claim_job("w2", LEASE_S, 2) is None
    await store.renew_lease(job_id, "w1", 0.001)  # about to expire
    job = await _claim_eventually(store, "w2")
    assert (job.id, job.lease_owner) == (job_id, "w2")
    assert not (await store.renew_lease(job_id, "w1", LEASE_S)).held


async def _claim_eventually(store: PostgresJobQueue, owner: str) -> Job:
    for _ in range(1000):
        job = await store.claim_job(owner, LEASE_S, 2)
        if job is not None:
            return job
        await asyncio.sleep(0.005)
    raise AssertionError("the lease never expired")


async def test_an_in_process_job_is_never_claimed(env: Env, client: int) -> None:
    job_id = uuid.uuid4()
    await env.store.create_job(
        NewJob(job_id, client, None, "local.csv", "csv", "merge", 10, 1, in_process=True),
        JobStatus.QUEUED,
    )
    assert await env.store.claim_job("w1", LEASE_S, 2) is None
    view = await env.views.request_cancel(client, job_id)  # its process holds it
    assert (view.status, view.cancel_requested) == (JobStatus.QUEUED, True)


async def test_a_command_line_job_holds_a_lease_that_expires_and_is_never_claimed(
    env: Env, client: int
) -> None:
    """The CLI's job is created under its process's lease; once the process died (the lease
    expired) it is abandoned, still never claimed by a worker: `importer job resume` takes it
    over, refusing while the lease is live."""
    job_id = uuid.uuid4()
    new_job = NewJob(
        job_id, client, None, "local.csv", "csv", "merge", 10, 1,
        in_process=True, lease_owner="cli-1", lease_s=LEASE_S, local_path="/tmp/local.csv",
    )  # fmt: skip
    job = await env.store.create_job(new_job, JobStatus.QUEUED)
    assert (job.lease_owner, job.local_path) == ("cli-1", "/tmp/local.csv")
    await env.store.transition(job_id, JobStatus.NORMALIZING, owner="cli-1")
    await env.store.transition(job_id, JobStatus.IMPORTING, owner="cli-1")
    with pytest.raises(IllegalTransitionError, match="lease is live"):
        await env.store.take_over_job(job_id, "cli-2", LEASE_S, "resume:1")
    assert (await env.store.renew_lease(job_id, "cli-1", 0.05)).held  # its last renewal
    await asyncio.sleep(0.1)  # the process died: nothing renews the lease
    assert await env.store.claim_job("w1", LEASE_S, 2) is None
    taken = await env.store.take_over_job(job_id, "cli-2", LEASE_S, "resume:1")
    assert (taken.status, taken.lease_owner) == (JobStatus.IMPORTING, "cli-2")
    assert not (await env.store.renew_lease(job_id, "cli-1", LEASE_S)).held  # fenced out
    run = await fetch(env.dsn, "SELECT run_generation FROM import_job WHERE id = $1", job_id)
    assert run[0]["run_generation"] == 1  # never finalized: the same run goes on
    # Died still queued (waiting for its client's turn): abandoned too; a worker's queued job
    # is the workers' to claim.
    waiting = await env.store.create_job(
        dataclasses.replace(new_job, id=uuid.uuid4(), lease_s=0.05), JobStatus.QUEUED
    )
    await asyncio.sleep(0.1)
    taken = await env.store.take_over_job(waiting.id, "cli-3", LEASE_S, "resume:2")
    assert (taken.status, taken.lease_owner) == (JobStatus.QUEUED, "cli-3")
    queued = await bare_job(env, client, JobStatus.QUEUED)
    with pytest.raises(IllegalTransitionError, match="only an ended or abandoned one"):
        await env.store.take_over_job(queued, "cli-3", LEASE_S, "resume:3")


# --- waking idle workers ----------------------------------------------------------------------


async def test_wait_for_jobs_wakes_on_start_and_survives_a_dropped_connection(
    env: Env, client: int
) -> None:
    store = env.store
    await store.wait_for_jobs(0)  # opens the LISTEN connection
    await asyncio.wait_for(store.wait_for_jobs(0.05), 5)  # nothing queued: the timeout
    await env.views.start_job(client, await bare_job(env, client, JobStatus.UPLOADED), None)
    async with asyncio.timeout(5):
        await store.wait_for_jobs(60)  # woken by the notification, not the timeout

    await fetch(
        env.dsn,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND query LIKE 'LISTEN%'",
    )
    async with asyncio.timeout(5):
        await store.wait_for_jobs(60)  # the drop wakes the waiter (a notification may be lost)
    await store.wait_for_jobs(0)  # reconnects
    await env.views.start_job(client, await bare_job(env, client, JobStatus.UPLOADED), None)
    async with asyncio.timeout(5):
        await store.wait_for_jobs(60)


async def test_wait_for_jobs_without_a_dsn_listens_per_call(env: Env, client: int) -> None:
    store = PostgresJobQueue(env.pool)
    job_id = await bare_job(env, client, JobStatus.UPLOADED)
    waiting = asyncio.create_task(store.wait_for_jobs(60), name="waiting")

    async def listening() -> bool | None:
        rows = await fetch(
            env.dsn,
            "SELECT 1 FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN%' AND state = 'idle'",
        )
        return True if rows else None

    await eventually(listening, 5)
    await env.views.start_job(client, job_id, None)
    async with asyncio.timeout(5):
        await waiting
