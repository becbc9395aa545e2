"""Workers on the real PostgreSQL and a local object store: runs equal the CLI's, resumes after a
lost worker apply nothing twice, fencing, cancel between chunks, draining on stop, the sweep of
expired previews."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from importer.adapters.storage.local import LocalObjectStore
from importer.core import lifecycle
from importer.core.config import PipelineConfig
from importer.core.errors import ImportAlreadyAppliedError, LeaseLostError
from importer.core.models import Batch, ContactRow, Counters, Job, JobStatus, JobView
from importer.pipeline.run import ImportRun
from importer.services.runs import ObjectSource
from importer.services.worker import Worker
from importer.settings import Settings
from tests.jobs_support import (
    WAIT_S,
    Env,
    as_tuple,
    contacts_csv,
    eventually,
    job_env,
    ledger,
    ledger_chunks,
    notification_type,
    upload_job,
)
from tests.support import (
    cpf,
    db_state,
    fetch,
    finalization_counts,
    import_file,
    tables_checksum,
)

pytestmark = pytest.mark.integration

CHUNK = 7
PARTITIONS = 2


@pytest.fixture
async def env(db_dsn: str, tmp_path: Path) -> AsyncIterator[Env]:
    async with job_env(db_dsn, tmp_path) as opened:
        yield opened


@pytest.fixture
def client(client_ids: Iterator[int]) -> int:
    return next(client_ids)


def worker_settings(env: Env, *, lease_s: float = 30.0, block: int = 2048) -> Settings:
    return Settings(
        database_url=env.dsn,
        lease_seconds=lease_s,
        worker_poll_seconds=0.05,
        read_block_bytes=block,
    )


def worker(env: Env, owner: str, settings: Settings, stop: asyncio.Event | None = None) -> Worker:
    return Worker(
        env.store,
        env.objects,
        settings,
        owner=owner,
        stop=stop or asyncio.Event(),
        burst=True,
        local_files=LocalObjectStore,
    )


async def started(env: Env, client: int, path: Path) -> uuid.UUID:
    job_id = await upload_job(env, client, path, chunk_size=CHUNK, partitions=PARTITIONS)
    await env.views.start_job(client, job_id, f"start:{job_id}")
    return job_id


async def cli_reference(env: Env, client: int, path: Path) -> Counters:
    """The same file imported by the CLI's in-process path, for another client."""
    outcome = await import_file(env.dsn, path, client, chunk_size=CHUNK, concurrency=PARTITIONS)
    return outcome.counters


async def error_rows(dsn: str, job_id: uuid.UUID) -> list[tuple[int, str]]:
    rows = await fetch(
        dsn,
        "SELECT line, reason FROM import_row_error WHERE job_id = $1 ORDER BY line, reason",
        job_id,
    )
    return [(r["line"], r["reason"]) for r in rows]


async def lease_of(dsn: str, job_id: uuid.UUID) -> tuple[str | None, bool]:
    """(owner, expired) of the job's lease."""
    rows = await fetch(
        dsn,
        "SELECT lease_owner, lease_expires_at <= now() AS expired FROM import_job WHERE id = $1",
        job_id,
    )
    return rows[0]["lease_owner"], rows[0]["expired"]


async def test_a_started_job_runs_to_the_same_result_as_the_cli(
    env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    path = contacts_csv(tmp_path / "contacts.csv", 120)
    mine, reference = next(client_ids), next(client_ids)
    job_id = await started(env, mine, path)
    await asyncio.wait_for(worker(env, "w1", worker_settings(env)).run(), WAIT_S)

    view = await env.views.view_job(mine, job_id)
    expected = await cli_reference(env, reference, path)
    assert view.status is JobStatus.COMPLETED_WITH_PLACEHOLDERS  # "plano" became a field
    assert as_tuple(view.counters) == as_tuple(expected)
    assert view.counters.balanced
    assert view.rows_done == 120
    assert view.bytes_read == view.source_size == path.stat().st_size
    assert view.started_at is not None
    assert view.finished_at is not None
    assert await db_state(env.dsn, mine) == await db_state(env.dsn, reference)
    assert await finalization_counts(env.dsn, job_id) == (1, 1)
    assert await notification_type(env.dsn, job_id) == "import_partial"
    assert (await lease_of(env.dsn, job_id))[1]  # released


async def test_a_replaced_file_fails_the_job_checksum_mismatch(
    env: Env, client: int, tmp_path: Path
) -> None:
    path = contacts_csv(tmp_path / "contacts.csv", 20)
    job_id = await started(env, client, path)
    view = await env.views.view_job(client, job_id)
    (tmp_path / "objects" / view.source).write_bytes(b"nome,cpf\nother,bytes\n")
    await asyncio.wait_for(worker(env, "w1", worker_settings(env)).run(), WAIT_S)
    failed = await env.views.view_job(client, job_id)
    assert (failed.status, failed.fail_reason) == (JobStatus.FAILED, "checksum_mismatch")
    assert await finalization_counts(env.dsn, job_id) == (1, 1)
    assert await ledger_chunks(env.dsn, job_id) == 0


@dataclass
class StopAfterRows:
    """A progress that asks the run to stop once ``rows`` rows are applied (a worker dying)."""

    stop: asyncio.Event
    rows: int

    def on_start(self, bytes_total: int | None) -> None:
        pass

    def on_batch(self, counters: Counters, bytes_read: int) -> None:
        if counters.rows_read >= self.rows:
            self.stop.set()


async def test_a_lost_worker_s_job_is_reclaimed_resumed_and_fenced(
    env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    path = contacts_csv(tmp_path / "contacts.csv", 400)
    mine, reference = next(client_ids), next(client_ids)
    job_id = await started(env, mine, path)
    store = env.store
    config = PipelineConfig(limits=Settings().limits, read_block_bytes=1024)

    async def source() -> ObjectSource:
        view = await env.views.view_job(mine, job_id)
        assert view.source_size is not None
        assert view.source_sha256 is not None
        return await ObjectSource.verified(
            env.objects, view.source, view.source_size, view.source_sha256
        )

    # Worker A claims with a lease that expires at once, applies a part and dies (no release).
    job_a = await store.claim_job("A", 0.001, 2)
    assert job_a is not None
    assert job_a.lease_owner == "A"
    stop_a = asyncio.Event()
    run_a = ImportRun(job_a, await source(), store, config, StopAfterRows(stop_a, 30), stop_a)
    assert await run_a.run() is None  # stopped between chunks, not finalized
    done_by_a = await ledger(env.dsn, job_id)
    assert 30 <= done_by_a.rows_read < 400
    # B will read on from A's checkpoint: the SQL twin of lifecycle.checkpoint over the ledger.
    positions = await fetch(
        env.dsn,
        "SELECT chunk_no, partition, end_offset, end_line FROM import_chunk"
        " WHERE job_id = $1 AND part = 1",
        job_id,
    )
    expected_checkpoint = lifecycle.checkpoint(
        {(r[0], r[1]): (r[2], r[3]) for r in positions}, PARTITIONS
    )
    assert expected_checkpoint is not None
    assert expected_checkpoint.end_offset > 0
    assert await store.checkpoint(job_id, PARTITIONS) == expected_checkpoint

    # Worker B reclaims the expired lease and resumes where A stopped.
    async def claim_b() -> Job | None:
        return await store.claim_job("B", 30.0, 2)

    job_b = await eventually(claim_b)
    assert job_b.id == job_id
    assert (job_b.lease_owner, job_b.status) == ("B", JobStatus.IMPORTING)

    # A's writes are fenced off now: each raises LeaseLostError and writes nothing.
    stray = Batch(10_000, 0, 999, 1, (ContactRow(999, cpf(987_654), "Stray", None),))
    with pytest.raises(LeaseLostError):
        await store.apply_batch(job_a, stray)
    with pytest.raises(LeaseLostError):
        await store.discard_batch(job_a, stray, 4, "boom")
    with pytest.raises(LeaseLostError):
        await store.transition(job_id, JobStatus.IMPORTING, owner="A")
    with pytest.raises(LeaseLostError):
        await store.finalize(job_id, None, owner="A")
    with pytest.raises(LeaseLostError):
        await store.finalize(job_id, None, cancelled=True, owner="A")
    assert as_tuple(await ledger(env.dsn, job_id)) == as_tuple(done_by_a)
    assert cpf(987_654) not in await db_state(env.dsn, mine)
    assert await finalization_counts(env.dsn, job_id) == (0, 0)
    assert (await env.views.view_job(mine, job_id)).status is JobStatus.IMPORTING
    # A repeat is told apart from a lost lease: the holder's repeat is a no-op, A's is refused.
    repeat = Batch(0, 0, 2, 1, (ContactRow(2, cpf(987_655), "Repeat", None),))
    assert await store.apply_batch(job_b, repeat) is None
    with pytest.raises(LeaseLostError):
        await store.apply_batch(job_a, repeat)
    assert cpf(987_655) not in await db_state(env.dsn, mine)

    run_b = ImportRun(job_b, await source(), store, config)
    finalized = await run_b.run()
    assert finalized is not None
    assert run_b.state.counters.rows_read == 400 - done_by_a.rows_read  # nothing applied twice
    expected = await cli_reference(env, reference, path)
    assert as_tuple(finalized.counters) == as_tuple(expected)
    assert finalized.counters.balanced
    assert await db_state(env.dsn, mine) == await db_state(env.dsn, reference)
    assert await finalization_counts(env.dsn, job_id) == (1, 1)
    reference_job = await fetch(
        env.dsn, "SELECT id FROM import_job WHERE client_id = $1", reference
    )
    assert await error_rows(env.dsn, job_id) == await error_rows(env.dsn, reference_job[0]["id"])
    with pytest.raises(LeaseLostError):  # a finalized job takes no batch, even from its holder
        await store.apply_batch(job_b, stray)


async def test_a_cancel_stops_the_run_between_chunks_with_truthful_counters(
    env: Env, client: int, tmp_path: Path
) -> None:
    path = contacts_csv(tmp_path / "big.csv", 3000)
    job_id = await started(env, client, path)
    run = asyncio.create_task(
        worker(env, "w1", worker_settings(env, lease_s=0.3)).run(), name="worker"
    )

    async def some_chunk_done() -> int | None:
        return await ledger_chunks(env.dsn, job_id) or None

    await eventually(some_chunk_done)
    requested = await env.views.request_cancel(client, job_id)
    assert requested.cancel_requested
    await asyncio.wait_for(run, WAIT_S)

    view = await env.views.view_job(client, job_id)
    truth = await ledger(env.dsn, job_id)
    assert view.status is JobStatus.CANCELLED
    assert as_tuple(view.counters) == as_tuple(truth)  # the ledger's sums, exactly
    assert view.counters.balanced
    assert 0 < view.counters.rows_read < 3000  # stopped between chunks, not at the end
    assert await finalization_counts(env.dsn, job_id) == (1, 1)
    assert await notification_type(env.dsn, job_id) == "import_cancelled"
    contacts = await fetch(
        env.dsn, "SELECT count(*) AS n FROM contact WHERE import_job_id = $1", job_id
    )
    assert contacts[0]["n"] == view.counters.inserted  # the writes and counters agree


async def test_stop_drains_releases_the_lease_and_the_next_worker_resumes(
    env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    path = contacts_csv(tmp_path / "big.csv", 1500)
    mine, reference = next(client_ids), next(client_ids)
    job_id = await started(env, mine, path)
    stop = asyncio.Event()
    settings = worker_settings(env)
    first = asyncio.create_task(
        Worker(
            env.store, env.objects, settings, owner="w1", stop=stop, local_files=LocalObjectStore
        ).run(),
        name="w1",
    )

    async def some_chunk_done() -> int | None:
        return await ledger_chunks(env.dsn, job_id) or None

    await eventually(some_chunk_done)
    stop.set()
    await asyncio.wait_for(first, WAIT_S)
    drained = await env.views.view_job(mine, job_id)
    assert drained.status is JobStatus.IMPORTING  # not finalized: resumable
    assert 0 < drained.rows_done < 1500
    assert drained.counters.balanced
    assert await lease_of(env.dsn, job_id) == ("w1", True)  # released: claimable at once
    assert await finalization_counts(env.dsn, job_id) == (0, 0)

    await asyncio.wait_for(worker(env, "w2", settings).run(), WAIT_S)
    view = await env.views.view_job(mine, job_id)
    assert view.status is JobStatus.COMPLETED_WITH_PLACEHOLDERS
    assert as_tuple(view.counters) == as_tuple(await cli_reference(env, reference, path))
    assert await db_state(env.dsn, mine) == await db_state(env.dsn, reference)
    assert await finalization_counts(env.dsn, job_id) == (1, 1)


async def test_a_job_cancelled_after_its_worker_died_ends_cancelled_without_running(
    env: Env, client: int, tmp_path: Path
) -> None:
    job_id = await started(env, client, contacts_csv(tmp_path / "c.csv", 30))
    assert await env.store.claim_job("ghost", 0.001, 2) is not None  # claims, then dies
    requested = await env.views.request_cancel(client, job_id)
    assert (requested.status, requested.cancel_requested) == (JobStatus.QUEUED, True)

    async def expired() -> bool | None:
        return True if (await lease_of(env.dsn, job_id))[1] else None

    await eventually(expired)
    await asyncio.wait_for(worker(env, "w1", worker_settings(env)).run(), WAIT_S)
    view = await env.views.view_job(client, job_id)
    assert view.status is JobStatus.CANCELLED
    assert as_tuple(view.counters) == (0, 0, 0, 0, 0, 0)
    assert view.started_at is None  # never ran
    assert await finalization_counts(env.dsn, job_id) == (1, 1)


@pytest.mark.parametrize("shape", ["two workers", "one worker, two slots"])
async def test_two_jobs_run_at_once(
    env: Env, client_ids: Iterator[int], tmp_path: Path, shape: str
) -> None:
    paths = [contacts_csv(tmp_path / f"f{i}.csv", 60, first=i * 1000) for i in range(2)]
    jobs = [await started(env, next(client_ids), path) for path in paths]
    settings = worker_settings(env)
    if shape == "two workers":
        runs = [worker(env, "w1", settings).run(), worker(env, "w2", settings).run()]
    else:
        runs = [
            Worker(
                env.store,
                env.objects,
                settings,
                owner="w1",
                stop=asyncio.Event(),
                max_jobs=2,
                burst=True,
                local_files=LocalObjectStore,
            ).run()
        ]
    await asyncio.wait_for(asyncio.gather(*runs), WAIT_S)
    owners = set()
    for job_id in jobs:
        assert await finalization_counts(env.dsn, job_id) == (1, 1)
        rows = await fetch(
            env.dsn, "SELECT status, lease_owner FROM import_job WHERE id = $1", job_id
        )
        assert rows[0]["status"] == "completed_with_placeholders"
        owners.add(rows[0]["lease_owner"])
    assert len(owners) == (2 if shape == "two workers" else 1)


SWEEP_S = 0.1  # the sweep interval the next test gives its worker (the default is a minute)


async def test_a_running_worker_sweeps_an_expired_preview_to_cancelled(
    env: Env, client: int, tmp_path: Path
) -> None:
    """A preview resting in ``ready`` is left alone by the sweeps while it is within its time to
    live; once past it, the running worker's next sweep (``_claim`` → ``expire_previews``)
    cancels it, well within a bound far below the default interval, and no contact changes."""
    await import_file(env.dsn, contacts_csv(tmp_path / "stored.csv", 40), client)
    path = contacts_csv(tmp_path / "preview.csv", 60, first=20)  # new keys and stored ones
    job_id = await upload_job(
        env, client, path, chunk_size=CHUNK, partitions=PARTITIONS, preview=True
    )
    await env.views.start_job(client, job_id, f"start:{job_id}")
    checksum, state = await tables_checksum(env.dsn), await db_state(env.dsn, client)
    stop = asyncio.Event()
    sweeper = Worker(
        env.store,
        env.objects,
        worker_settings(env),
        owner="w1",
        stop=stop,
        local_files=LocalObjectStore,
        preview_expiry_every_s=SWEEP_S,
    )
    running = asyncio.create_task(sweeper.run(), name="w1")
    try:

        async def resting() -> JobView | None:
            view = await env.views.view_job(client, job_id)
            return view if view.status is JobStatus.READY and view.awaiting_apply else None

        rested = await eventually(resting)
        assert rested.preview is not None
        assert rested.preview_expires_at is not None
        assert rested.preview_expires_at > dt.datetime.now(dt.UTC) + dt.timedelta(hours=23)
        await asyncio.sleep(SWEEP_S * 5)  # several sweeps: an unexpired preview keeps resting
        still = await env.views.view_job(client, job_id)
        assert (still.status, still.awaiting_apply) == (JobStatus.READY, True)

        await fetch(
            env.dsn,
            "UPDATE import_job SET preview_expires_at = now() - interval '1 second' WHERE id = $1",
            job_id,
        )

        async def swept() -> JobView | None:
            view = await env.views.view_job(client, job_id)
            return view if view.status is JobStatus.CANCELLED else None

        cancelled = await eventually(swept, timeout_s=10.0)  # the default sweep: 60 s
        assert not running.done()  # the worker ran all along: its sweep cancelled it
    finally:
        stop.set()
        await asyncio.wait_for(running, WAIT_S)

    assert not cancelled.awaiting_apply
    assert cancelled.fail_reason is None
    assert as_tuple(cancelled.counters) == (0, 0, 0, 0, 0, 0)  # nothing was imported
    assert cancelled.finished_at is not None
    assert await finalization_counts(env.dsn, job_id) == (1, 1)  # finalized once
    assert await notification_type(env.dsn, job_id) == "import_cancelled"
    assert await ledger_chunks(env.dsn, job_id) == 0
    assert await tables_checksum(env.dsn) == checksum  # the contact tables byte-identical
    assert await db_state(env.dsn, client) == state
    staged = await fetch(
        env.dsn, "SELECT count(*) AS n FROM import_preview_row WHERE job_id = $1", job_id
    )
    assert staged[0]["n"] == 0
    with pytest.raises(ImportAlreadyAppliedError):  # ended: there is nothing left to apply
        await env.views.apply_preview(client, job_id, f"apply:{job_id}")
