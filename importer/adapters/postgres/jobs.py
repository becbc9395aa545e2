"""A job's row through its run: created, moved through the guarded transitions, finalized once,
warned about, reported on. The job half of the :class:`importer.ports.Store` (the batch half is
:mod:`importer.adapters.postgres.batches`), and the statements on a job row the other classes of
this package share (finalization, the owner's lock, the error report).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import structlog

from importer.adapters.postgres.columns import remember_on
from importer.adapters.postgres.duplicates import duplicate_rows
from importer.adapters.postgres.pool import Conn, pooled, translated_errors
from importer.adapters.postgres.records import (
    counters_of,
    job_from_row,
    job_values,
    now,
    storable_text,
    warnings_of,
)
from importer.core import failpoints, lifecycle
from importer.core.duplicates import Competition
from importer.core.errors import (
    IllegalTransitionError,
    JobNotFoundError,
    LeaseLostError,
    PreviewExpiredError,
)
from importer.core.models import (
    Finalized,
    Job,
    JobStatus,
    JobWarning,
    NewJob,
    Reason,
    RowIssue,
    Severity,
)
from importer.sql import queries

log = structlog.get_logger(__name__)


async def insert_job(conn: Conn | asyncpg.Pool, new_job: NewJob, status: JobStatus) -> None:
    """The job's row, through ``conn`` (a transaction that also inserts its links)."""
    await conn.execute(queries()["insert_job"], *job_values(new_job, status))


async def finalize_on(
    conn: Conn,
    job_id: uuid.UUID,
    target: JobStatus,
    fail_reason: str | None,
    sources: list[str],
    owner: str | None,
) -> asyncpg.Record | None:
    """finalize_job in the caller's transaction, committed synchronously, once the batches
    in flight on other instances have committed (``lock_job``)."""
    q = queries()
    await conn.execute(q["synchronous_commit"])
    await conn.execute(q["lock_job"], job_id)
    row = await conn.fetchrow(
        q["finalize_job"], job_id, target.value, fail_reason, now(), sources, owner
    )
    if row is not None:  # a completed import's column mapping joins its client's memory
        await remember_on(conn, job_id)
    return row


async def apply_preview(
    pool: asyncpg.Pool, job_id: uuid.UUID, client_id: int | None, operation_id: str | None
) -> None:
    """Hand a resting preview to its next run (``client_id`` None: any client's job, the
    owner's command line). An expired one is finalized ``cancelled`` and refused
    (PreviewExpiredError); other refusals as ``lifecycle.apply_action`` says."""
    q = queries()
    with translated_errors():
        async with pooled(pool) as conn, conn.transaction():
            row = await conn.fetchrow(q["lock_preview"], job_id, client_id)
            if row is None:
                raise JobNotFoundError(f"import {job_id} does not exist")
            action = lifecycle.apply_action(
                JobStatus(row["status"]),
                preview_requested=row["preview_requested"],
                awaiting_apply=row["awaiting_apply"],
                expired=row["expired"],
            )
            if action is lifecycle.ApplyAction.APPLY:
                # Through the API (a client): the workers run it, whoever made the preview.
                await conn.execute(q["apply_preview"], job_id, operation_id, client_id is not None)
                return
            await _expire(conn, job_id)
    raise PreviewExpiredError(f"import {job_id}: the preview expired unapplied (cancelled)")


async def expire_previews(pool: asyncpg.Pool, limit: int = 100) -> int:
    """Cancel the previews that waited past their time to live; how many."""
    q = queries()
    expired = 0
    with translated_errors():
        for row in await pool.fetch(q["expired_previews"], limit):
            async with pooled(pool) as conn, conn.transaction():
                current = await conn.fetchrow(q["lock_preview"], row["id"], None)
                if current is not None and current["awaiting_apply"] and current["expired"]:
                    expired += await _expire(conn, row["id"])
    if expired:
        log.info("previews_expired", count=expired)
    return expired


async def _expire(conn: Conn, job_id: uuid.UUID) -> int:
    target = JobStatus.CANCELLED
    sources = lifecycle.allowed_sources(target)
    return int(await finalize_on(conn, job_id, target, None, sources, None) is not None)


async def admin_locked(conn: Conn, client_id: int | None, job_id: uuid.UUID) -> asyncpg.Record:
    """The job's row locked for the owner's operations (lock_admin_job), for ``client_id``
    (None: any client's)."""
    row = await conn.fetchrow(queries()["lock_admin_job"], job_id, client_id)
    if row is None:
        raise JobNotFoundError(f"import {job_id} does not exist")
    return row


def refuse_requeue(current: asyncpg.Record) -> None:
    """Raise why a job (its lock_admin_job row) can neither be requeued nor resumed, if so."""
    refusal = lifecycle.requeue_refusal(
        JobStatus(current["status"]),
        data_removed=current["data_removed"],
        lease_live=current["lease_live"],
        in_process=current["in_process"],
        awaiting_apply=current["awaiting_apply"],
    )
    if refusal is not None:
        raise refusal


async def row_issues(pool: asyncpg.Pool, job_id: uuid.UUID) -> AsyncIterator[RowIssue]:
    """The error report's rows by line: the job's file-level warnings first (line 0)."""
    q = queries()
    with translated_errors():
        async with pooled(pool) as conn, conn.transaction():
            stored = await conn.fetchval(q["job_warnings"], job_id)
            for warning in warnings_of(stored):
                yield warning.as_issue()
            async for r in conn.cursor(q["row_errors"], job_id, prefetch=2000):
                yield RowIssue(
                    r["line"],
                    r["column_name"],
                    Reason(r["reason"]),
                    r["value"],
                    Severity(r["severity"]),
                )


class PostgresJobs:
    """The job rows as a run sees them (the job half of :class:`importer.ports.Store`)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._q = queries()

    async def create_job(self, new_job: NewJob, status: JobStatus) -> Job:
        with translated_errors():
            await insert_job(self._pool, new_job, status)
        return await self.get_job(new_job.id)

    async def get_job(self, job_id: uuid.UUID) -> Job:
        with translated_errors():
            row = await self._pool.fetchrow(self._q["get_job"], job_id)
        if row is None:
            raise JobNotFoundError(f"import {job_id} does not exist")
        return job_from_row(row)

    async def transition(
        self, job_id: uuid.UUID, target: JobStatus, *, owner: str | None = None
    ) -> None:
        with translated_errors():
            moved = await self._pool.fetchval(
                self._q["transition_job"],
                job_id,
                target.value,
                lifecycle.allowed_sources(target),
                owner,
            )
        if moved is None:
            job = await self.leased_job(job_id, owner)
            raise IllegalTransitionError(f"import {job_id}: {job.status.value} → {target.value}")

    async def finalize(
        self,
        job_id: uuid.UUID,
        fail_reason: str | None,
        *,
        cancelled: bool = False,
        owner: str | None = None,
    ) -> Finalized | None:
        target = lifecycle.final_status(fail_reason, cancelled)
        sources = lifecycle.allowed_sources(target)
        if failpoints.armed is not None:
            await failpoints.armed.reach(failpoints.BEFORE_FINALIZE)
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                row = await finalize_on(conn, job_id, target, fail_reason, sources, owner)
        if failpoints.armed is not None:
            await failpoints.armed.reach(failpoints.AFTER_FINALIZE_BEFORE_RETURN)
        if row is None:
            await self.leased_job(job_id, owner)
            return None
        return Finalized(JobStatus(row["status"]), counters_of(row))

    async def mark_read_to_end(self, job_id: uuid.UUID, *, owner: str | None = None) -> None:
        with translated_errors():
            await self._pool.execute(self._q["mark_read_to_end"], job_id, owner)

    async def leased_job(self, job_id: uuid.UUID, owner: str | None) -> Job:
        """The job; LeaseLostError when ``owner`` is given and no longer holds its lease."""
        job = await self.get_job(job_id)
        if owner is not None and job.lease_owner != owner:
            raise LeaseLostError(f"import {job_id} is leased to {job.lease_owner}, not {owner}")
        return job

    async def add_warning(self, job_id: uuid.UUID, warning: JobWarning) -> None:
        with translated_errors():
            await self._pool.execute(
                self._q["add_job_warning"],
                job_id,
                warning.code.value,
                storable_text(warning.message),
            )

    def row_issues(self, job_id: uuid.UUID) -> AsyncIterator[RowIssue]:
        return row_issues(self._pool, job_id)

    def duplicates(self, job_id: uuid.UUID) -> AsyncIterator[Competition]:
        return duplicate_rows(self._pool, job_id)
