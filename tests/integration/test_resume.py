"""`importer job resume` in-process on the real PostgreSQL: a command-line import stopped by
its user ends ``cancelled`` with the ledger's counters; its resume refuses a changed or missing
file, leaving the job as it was, and with the sealed file ends as an undisturbed import; a
requeue hands it to a worker, which reads the same sealed local file."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from importer.adapters.storage.local import LocalObjectStore
from importer.core.errors import ImportAlreadyAppliedError, ImporterError
from importer.core.lifecycle import RunEnding
from importer.core.models import ConflictStrategy, Counters, InputFormat, JobStatus
from importer.services.local import ImportRequest, import_source, resume_job, seal_local_file
from importer.services.worker import Worker
from importer.settings import Settings
from tests.jobs_support import Env, as_tuple, contacts_csv, job_env, ledger
from tests.support import db_state, fetch, finalization_counts, import_file

pytestmark = pytest.mark.integration

CHUNK = 7
PARTITIONS = 2


@pytest.fixture
async def env(db_dsn: str, tmp_path: Path) -> AsyncIterator[Env]:
    async with job_env(db_dsn, tmp_path) as env:
        yield env


class StopAfterFirstBatch:
    """The user's Ctrl-C, at a fixed point: right after the first batch committed."""

    def __init__(self, stop: asyncio.Event) -> None:
        self._stop = stop

    def on_start(self, bytes_total: int | None) -> None:
        pass

    def on_batch(self, counters: Counters, bytes_read: int) -> None:
        self._stop.set()


async def test_a_stopped_import_resumes_from_its_sealed_file_only(
    env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    client, reference = next(client_ids), next(client_ids)
    path = contacts_csv(tmp_path / "c.csv", 60)
    original = path.read_bytes()
    settings = Settings(database_url=env.dsn, chunk_size=CHUNK, concurrency=PARTITIONS)
    request = ImportRequest(client, ConflictStrategy.MERGE, InputFormat.CSV, CHUNK, PARTITIONS)
    stop = asyncio.Event()
    local = await seal_local_file(path, LocalObjectStore)
    stopped = await import_source(
        env.store,
        local.source,
        request,
        settings,
        StopAfterFirstBatch(stop),
        stop,
        sealed=local.sealed,
        local_path=local.path,
    )
    assert (stopped.status, stopped.ending) == (JobStatus.CANCELLED, RunEnding.CANCELLED)
    assert stopped.counters.balanced
    assert as_tuple(stopped.counters) == as_tuple(await ledger(env.dsn, stopped.job_id))
    assert 0 < stopped.counters.rows_read < 60

    path.write_bytes(original + b"Late,52998235811,,,\n")
    with pytest.raises(ImporterError, match="is not the file it imported"):
        await resume_job(
            env.store, lambda _: env.objects, stopped.job_id, settings, local_files=LocalObjectStore
        )
    path.unlink()
    with pytest.raises(ImporterError, match="is not there"):
        await resume_job(
            env.store, lambda _: env.objects, stopped.job_id, settings, local_files=LocalObjectStore
        )
    row = await fetch(
        env.dsn, "SELECT status, run_generation FROM import_job WHERE id = $1", stopped.job_id
    )
    assert (row[0]["status"], row[0]["run_generation"]) == ("cancelled", 1)  # untouched

    path.write_bytes(original)
    resumed = await resume_job(
        env.store, lambda _: env.objects, stopped.job_id, settings, local_files=LocalObjectStore
    )
    assert (resumed.status, resumed.ending) == (
        JobStatus.COMPLETED_WITH_PLACEHOLDERS,
        RunEnding.FINISHED,
    )
    undisturbed = await import_file(
        env.dsn, path, reference, chunk_size=CHUNK, concurrency=PARTITIONS
    )
    assert as_tuple(resumed.counters) == as_tuple(undisturbed.counters)
    assert await db_state(env.dsn, client) == await db_state(env.dsn, reference)
    # One finalization row (the last run's), one notification per finalized run.
    assert await finalization_counts(env.dsn, stopped.job_id) == (1, 2)
    with pytest.raises(ImportAlreadyAppliedError):
        await resume_job(
            env.store, lambda _: env.objects, stopped.job_id, settings, local_files=LocalObjectStore
        )


async def test_a_requeued_command_line_import_is_run_on_by_a_worker_from_its_local_file(
    env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    """`importer job requeue` hands a command-line import to the workers: a worker on the
    machine holding the file reads it at its sealed path and ends the job as undisturbed."""
    client, reference = next(client_ids), next(client_ids)
    path = contacts_csv(tmp_path / "c.csv", 60)
    settings = Settings(database_url=env.dsn, chunk_size=CHUNK, concurrency=PARTITIONS)
    request = ImportRequest(client, ConflictStrategy.MERGE, InputFormat.CSV, CHUNK, PARTITIONS)
    stop = asyncio.Event()
    local = await seal_local_file(path, LocalObjectStore)
    stopped = await import_source(
        env.store,
        local.source,
        request,
        settings,
        StopAfterFirstBatch(stop),
        stop,
        sealed=local.sealed,
        local_path=local.path,
    )
    assert stopped.status is JobStatus.CANCELLED
    requeued = await env.admin.requeue_job(None, stopped.job_id, "requeue:1")
    assert requeued.run == 2  # its next run, for the workers
    worker = Worker(
        env.store,
        env.objects,
        settings,
        owner="w1",
        stop=asyncio.Event(),
        burst=True,
        local_files=LocalObjectStore,
    )  # its object store knows nothing of the file: the job's local path is read
    await asyncio.wait_for(worker.run(), 60)
    status = await fetch(env.dsn, "SELECT status FROM import_job WHERE id = $1", stopped.job_id)
    assert status[0]["status"] == "completed_with_placeholders"
    undisturbed = await import_file(
        env.dsn, path, reference, chunk_size=CHUNK, concurrency=PARTITIONS
    )
    assert as_tuple(await ledger(env.dsn, stopped.job_id)) == as_tuple(undisturbed.counters)
    assert await db_state(env.dsn, client) == await db_state(env.dsn, reference)
