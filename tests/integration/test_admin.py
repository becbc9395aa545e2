"""The owner's operations on the real PostgreSQL: requeue (a resumed run, one finalization and
one notification per run) and the removal of an import's data (seed 001's runbook)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from importer.adapters.storage.local import LocalObjectStore
from importer.core.errors import IllegalTransitionError, ImportAlreadyAppliedError, JobNotFoundError
from importer.core.models import ConflictStrategy, Counters, InputFormat, JobStatus
from importer.services.local import ImportRequest, import_source, seal_local_file
from importer.services.worker import Worker
from importer.settings import Settings
from tests.jobs_support import (
    WAIT_S,
    Env,
    as_tuple,
    bare_job,
    contacts_csv,
    eventually,
    job_env,
    ledger_chunks,
    upload_job,
)
from tests.support import db_state, fetch, finalization_counts, import_file

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


def run_worker(env: Env, *, lease_s: float = 30.0) -> Worker:
    settings = Settings(
        database_url=env.dsn, lease_seconds=lease_s, worker_poll_seconds=0.05, read_block_bytes=2048
    )
    return Worker(
        env.store,
        env.objects,
        settings,
        owner="w1",
        stop=asyncio.Event(),
        burst=True,
        local_files=LocalObjectStore,
    )


async def started(env: Env, client: int, path: Path) -> uuid.UUID:
    job_id = await upload_job(env, client, path, chunk_size=CHUNK, partitions=PARTITIONS)
    await env.views.start_job(client, job_id, f"start:{job_id}")
    return job_id


async def completed(env: Env, client: int, path: Path) -> uuid.UUID:
    job_id = await started(env, client, path)
    await asyncio.wait_for(run_worker(env).run(), WAIT_S)
    return job_id


async def reference(env: Env, client: int, path: Path) -> Counters:
    outcome = await import_file(env.dsn, path, client, chunk_size=CHUNK, concurrency=PARTITIONS)
    return outcome.counters


async def notification_ids(dsn: str, job_id: uuid.UUID) -> list[tuple[str, str]]:
    rows = await fetch(
        dsn,
        "SELECT message_id, payload->>'type' AS type FROM outbox"
        " WHERE topic = 'notification' AND payload->>'job_id' = $1 ORDER BY id",
        str(job_id),
    )
    return [(r["message_id"], r["type"]) for r in rows]


async def test_a_cancelled_job_requeued_resumes_and_finalizes_once_more(
    env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    path = contacts_csv(tmp_path / "big.csv", 1500)
    mine, other = next(client_ids), next(client_ids)
    job_id = await started(env, mine, path)
    run = asyncio.create_task(run_worker(env, lease_s=0.3).run(), name="worker")

    async def some_chunk_done() -> int | None:
        return await ledger_chunks(env.dsn, job_id) or None

    await eventually(some_chunk_done)
    await env.views.request_cancel(mine, job_id)
    await asyncio.wait_for(run, WAIT_S)
    cancelled = await env.views.view_job(mine, job_id)
    assert cancelled.status is JobStatus.CANCELLED
    chunks_kept = await ledger_chunks(env.dsn, job_id)

    with pytest.raises(JobNotFoundError):
        await env.admin.requeue_job(other, job_id, "x")
    requeued = await env.admin.requeue_job(mine, job_id, "requeue:1")
    assert (requeued.run, requeued.finalizations_removed) == (2, 1)
    view = await env.views.view_job(mine, job_id)
    assert view.status is JobStatus.QUEUED
    assert not view.cancel_requested
    assert view.fail_reason is None
    assert view.finished_at is None
    assert view.last_operation_id == "requeue:1"
    assert await ledger_chunks(env.dsn, job_id) == chunks_kept  # the ledger is kept
    assert await finalization_counts(env.dsn, job_id) == (0, 1)

    await asyncio.wait_for(run_worker(env).run(), WAIT_S)
    done = await env.views.view_job(mine, job_id)
    assert done.status is JobStatus.COMPLETED_WITH_PLACEHOLDERS
    assert as_tuple(done.counters) == as_tuple(await reference(env, other, path))
    assert await db_state(env.dsn, mine) == await db_state(env.dsn, other)
    assert await finalization_counts(env.dsn, job_id) == (1, 2)  # one per run
    assert await notification_ids(env.dsn, job_id) == [
        (f"notification:{job_id}", "import_cancelled"),
        (f"notification:{job_id}:2", "import_partial"),
    ]
    stats = await fetch(
        env.dsn,
        "SELECT message_id FROM outbox WHERE payload->>'job_id' = $1 AND topic <> $2",
        str(job_id),
        "notification",
    )
    assert [r["message_id"] for r in stats] == [f"stats-refresh:{job_id}:2"]


async def test_remove_data_then_requeue_imports_the_file_again_to_the_same_state(
    env: Env, client: int, tmp_path: Path
) -> None:
    path = contacts_csv(tmp_path / "contacts.csv", 120)
    job_id = await completed(env, client, path)
    first = await env.views.view_job(client, job_id)
    state = await db_state(env.dsn, client)
    issues = await fetch(
        env.dsn, "SELECT count(*) AS n FROM import_row_error WHERE job_id = $1", job_id
    )

    with pytest.raises(ImportAlreadyAppliedError):  # the one-time gate
        await env.admin.requeue_job(client, job_id, "too-early")
    removed = await env.admin.remove_job_data(client, job_id)
    assert removed.contacts == first.counters.inserted
    assert removed.details > 0
    assert removed.chunks == 2 * ((120 + CHUNK - 1) // CHUNK)
    assert removed.row_errors == issues[0]["n"] > 0
    assert await db_state(env.dsn, client) == {}  # soft-deleted: no live contact is left
    again = await env.admin.remove_job_data(client, job_id)
    assert (again.contacts, again.details, again.chunks, again.row_errors) == (0, 0, 0, 0)
    assert again.removed_at == removed.removed_at
    kept = await env.views.view_job(client, job_id)  # the history stays
    assert kept.status is JobStatus.COMPLETED_WITH_PLACEHOLDERS
    assert as_tuple(kept.counters) == as_tuple(first.counters)

    requeued = await env.admin.requeue_job(client, job_id, "reimport")
    assert requeued.run == 2
    await asyncio.wait_for(run_worker(env).run(), WAIT_S)
    second = await env.views.view_job(client, job_id)
    assert second.status is first.status
    assert as_tuple(second.counters) == as_tuple(first.counters)
    assert await db_state(env.dsn, client) == state
    assert await finalization_counts(env.dsn, job_id) == (1, 2)
    with pytest.raises(ImportAlreadyAppliedError):  # removal lets one requeue through, once
        await env.admin.requeue_job(client, job_id, "twice")


async def test_refusals(env: Env, client_ids: Iterator[int], tmp_path: Path) -> None:
    client, other = next(client_ids), next(client_ids)
    queued = await bare_job(env, client, JobStatus.QUEUED)
    with pytest.raises(IllegalTransitionError):
        await env.admin.requeue_job(client, queued, "x")
    with pytest.raises(IllegalTransitionError):
        await env.admin.remove_job_data(client, queued)
    with pytest.raises(JobNotFoundError):
        await env.admin.remove_job_data(other, queued)
    path = contacts_csv(tmp_path / "cli.csv", 10)
    outcome = await import_file(env.dsn, path, client)  # the command line's in-process job
    await env.admin.remove_job_data(client, outcome.job_id)
    # A command-line import goes to the workers too (they read its local path, if they can).
    await env.admin.requeue_job(None, outcome.job_id, "x")
    handed = await fetch(env.dsn, "SELECT in_process FROM import_job WHERE id = $1", outcome.job_id)
    assert handed[0]["in_process"] is False
    statuses = await env.admin.job_statuses(client, [queued, outcome.job_id, uuid.uuid4()])
    assert statuses == {
        queued: (client, JobStatus.QUEUED),
        outcome.job_id: (client, JobStatus.QUEUED),
    }
    assert await env.admin.job_statuses(other, [queued]) == {}
    assert await env.admin.job_statuses(None, [queued]) == {queued: (client, JobStatus.QUEUED)}


async def test_a_cancelled_preview_requeued_previews_again_and_writes_nothing(
    env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    """A preview nobody applied (cancelled or expired) is requeued as what it was: its next run
    previews the file again and rests in ``ready`` — it does not import what nobody applied."""
    path = contacts_csv(tmp_path / "preview.csv", 40)
    mine = next(client_ids)
    job_id = await upload_job(
        env, mine, path, chunk_size=CHUNK, partitions=PARTITIONS, preview=True
    )
    await env.views.start_job(mine, job_id, f"start:{job_id}")
    await asyncio.wait_for(run_worker(env).run(), WAIT_S)
    rested = await env.views.view_job(mine, job_id)
    assert rested.status is JobStatus.READY
    await env.views.request_cancel(mine, job_id)
    assert (await env.views.view_job(mine, job_id)).status is JobStatus.CANCELLED
    await env.admin.requeue_job(mine, job_id, "requeue:preview")
    await asyncio.wait_for(run_worker(env).run(), WAIT_S)
    again = await env.views.view_job(mine, job_id)
    assert again.status is JobStatus.READY
    assert again.awaiting_apply
    assert again.preview is not None
    assert again.preview["counters"] == rested.preview["counters"]  # type: ignore[index]
    assert await db_state(env.dsn, mine) == {}  # still nothing written


async def test_a_command_line_dry_run_applied_through_the_api_is_the_workers_to_run(
    env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    """``importer import --dry-run`` rests its job in ``ready`` as the command line's
    (in_process: no worker claims it); an apply through the API hands it to the workers, who
    import it — it never stays in ``ready`` waiting for a process that has gone."""
    path = contacts_csv(tmp_path / "dry.csv", 30)
    mine = next(client_ids)
    settings = Settings(database_url=env.dsn, chunk_size=CHUNK, concurrency=PARTITIONS)
    request = ImportRequest(
        mine, ConflictStrategy.MERGE, InputFormat.CSV, CHUNK, PARTITIONS, preview=True
    )
    local = await seal_local_file(path, LocalObjectStore)
    outcome = await import_source(
        env.store, local.source, request, settings, sealed=local.sealed, local_path=local.path
    )
    assert outcome.status is JobStatus.READY
    await env.views.apply_preview(mine, outcome.job_id, "apply:api")
    await asyncio.wait_for(run_worker(env).run(), WAIT_S)
    done = await env.views.view_job(mine, outcome.job_id)
    assert done.status in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_PLACEHOLDERS)
    assert done.preview is not None
    assert done.preview["counters"] == {  # type: ignore[index]
        "rows_read": done.counters.rows_read, "inserted": done.counters.inserted,
        "updated": done.counters.updated, "invalid": done.counters.invalid,
        "error": done.counters.error, "ignored": done.counters.ignored,
    }  # fmt: skip


async def test_remove_data_of_an_email_keyed_import_removes_its_contacts_without_cpf(
    env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    """The contacts a channel-keyed import created have no CPF (core.keys): the removal finds
    them by the ids its batches journaled, not by the client's CPF index."""
    client = next(client_ids)
    path = contacts_csv(tmp_path / "keyed.csv", 60)
    layout: dict[str, object] = {"key": "email", "columns": {"cpf": "ignore"}}
    job_id = await upload_job(env, client, path, chunk_size=CHUNK, partitions=1, layout=layout)
    await env.views.start_job(client, job_id, f"start:{job_id}")
    await asyncio.wait_for(run_worker(env).run(), WAIT_S)
    done = await env.views.view_job(client, job_id)
    assert done.counters.inserted > 0
    removed = await env.admin.remove_job_data(client, job_id)
    assert removed.contacts == done.counters.inserted
    live = await fetch(
        env.dsn,
        "SELECT count(*) AS n FROM contact WHERE client_id = $1 AND deleted_at IS NULL",
        client,
    )
    assert live[0]["n"] == 0
    journal = await fetch(
        env.dsn, "SELECT count(*) AS n FROM import_journal WHERE job_id = $1", job_id
    )
    assert journal[0]["n"] == 0  # the journal goes with the data
