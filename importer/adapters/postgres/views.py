"""The API's jobs on PostgreSQL: the :class:`importer.ports.JobStore` (and the owner's job
reads, :class:`importer.services.admin.JobReader`, for ``importer status`` and ``history``).

Every method answers a :class:`JobView`: the reads (one job, a page of the history) and the
client's own moves (upload done, start, cancel), each read back after it.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

import asyncpg

from importer.adapters.postgres import jobs
from importer.adapters.postgres.duplicates import duplicate_rows
from importer.adapters.postgres.jobs import finalize_on
from importer.adapters.postgres.pool import Conn, pooled, translated_errors
from importer.adapters.postgres.records import job_from_row, view_from_row
from importer.core import lifecycle
from importer.core.config import DEFAULT_RETENTION_DAYS
from importer.core.duplicates import Competition
from importer.core.errors import IllegalTransitionError, JobNotFoundError
from importer.core.models import Job, JobStatus, JobView, RowIssue
from importer.sql import queries

# The keyset of a first history page: after every (created_at, id).
_NO_CURSOR = (dt.datetime.max.replace(tzinfo=dt.UTC), uuid.UUID(int=(1 << 128) - 1))


class PostgresJobViews:
    """The :class:`importer.ports.JobStore`: the jobs as the API (and the owner) see them.

    Every method is scoped by client: another client's job is exactly like a missing one.
    ``client_id`` None is the owner's command line (`importer status`, `importer history`).
    """

    def __init__(self, pool: asyncpg.Pool, *, retention_days: int = DEFAULT_RETENTION_DAYS) -> None:
        self._pool = pool
        self._q = queries()
        self._retained = dt.timedelta(days=retention_days)

    def _retention(self, view: JobView) -> JobView:
        """The view with until when its import's data is kept (its end + the retention)."""
        if view.finished_at is None:
            return view
        return replace(view, retained_until=view.finished_at + self._retained)

    async def view_job(self, client_id: int | None, job_id: uuid.UUID) -> JobView:
        query, args = (
            ("view_any_job", (job_id,)) if client_id is None else ("view_job", (client_id, job_id))
        )
        with translated_errors():
            row = await self._pool.fetchrow(self._q[query], *args)
        if row is None:
            raise JobNotFoundError(f"import {job_id} does not exist")
        return self._retention(view_from_row(row))

    async def stored_job(self, client_id: int, job_id: uuid.UUID) -> Job:
        """The job as stored (its layout, format, file), scoped by client like :meth:`view_job`."""
        with translated_errors():
            row = await self._pool.fetchrow(self._q["get_job"], job_id)
        if row is None or row["client_id"] != client_id:
            raise JobNotFoundError(f"import {job_id} does not exist")
        return job_from_row(row)

    async def list_jobs(
        self,
        client_id: int | None,
        *,
        user_id: str | None,
        statuses: Sequence[JobStatus] | None,
        before: tuple[dt.datetime, uuid.UUID] | None,
        limit: int,
    ) -> list[JobView]:
        """Newest first by (created_at, id); ``before`` is the previous page's last item."""
        created_at, last_id = before or _NO_CURSOR
        wanted = lifecycle.values(statuses) if statuses is not None else None
        args: tuple[object, ...]
        if client_id is None:
            query, args = "list_any_jobs", (created_at, last_id, wanted, limit, user_id)
        else:
            args = (client_id, created_at, last_id, wanted, limit)
            query = "list_jobs" if user_id is None else "list_user_jobs"
            if user_id is not None:
                args += (user_id,)
        with translated_errors():
            rows = await self._pool.fetch(self._q[query], *args)
            views = [self._retention(view_from_row(row)) for row in rows]
            return await self._placed(views)

    async def _placed(self, views: list[JobView]) -> list[JobView]:
        """``views`` (a history page: the listing has no queue positions) with the places of
        their queued jobs, all found at once."""
        queued = [v.id for v in views if v.status is JobStatus.QUEUED]
        if not queued:
            return views
        rows = await self._pool.fetch(self._q["queue_positions"], queued)
        places = {r["job_id"]: r["job_position"] for r in rows}
        return [replace(v, queue_position=places.get(v.id)) for v in views]

    async def mark_uploaded(
        self,
        client_id: int,
        job_id: uuid.UUID,
        *,
        ok: bool,
        fail_reason: str | None,
        storage_version: str | None = None,
    ) -> JobView:
        """uploading → uploaded (recording the verified object version), or → failed with the
        reason through finalization. A repeat changes nothing; a job past its upload is refused.
        """
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                current = await self._locked(conn, client_id, job_id)
                target = lifecycle.upload_target(JobStatus(current["status"]), ok)
                if target is JobStatus.UPLOADED:
                    await conn.execute(
                        self._q["transition_client_job"],
                        job_id,
                        client_id,
                        target.value,
                        lifecycle.allowed_sources(target),
                        storage_version,
                    )
                elif target is JobStatus.FAILED:
                    sources = [JobStatus.UPLOADING.value]
                    await finalize_on(conn, job_id, target, fail_reason, sources, None)
        return await self.view_job(client_id, job_id)

    async def start_job(
        self, client_id: int, job_id: uuid.UUID, operation_id: str | None
    ) -> JobView:
        """uploaded → queued (waking the workers), queued → queued recording the operation id."""
        target = JobStatus.QUEUED
        with translated_errors():
            row = await self._pool.fetchrow(
                self._q["start_job"],
                job_id,
                client_id,
                operation_id,
                lifecycle.allowed_sources(target),
                target.value,
            )
        if row is None:
            raise JobNotFoundError(f"import {job_id} does not exist")
        if row["previous"] is None:
            current = JobStatus(row["current"])
            raise lifecycle.start_refusal(current) or IllegalTransitionError(current.value)
        return await self.view_job(client_id, job_id)

    async def apply_preview(
        self, client_id: int, job_id: uuid.UUID, operation_id: str | None
    ) -> JobView:
        """A resting preview handed to its next run (the workers are woken); see
        :func:`.jobs.apply_preview` for the refusals."""
        await jobs.apply_preview(self._pool, job_id, client_id, operation_id)
        return await self.view_job(client_id, job_id)

    async def request_cancel(self, client_id: int, job_id: uuid.UUID) -> JobView:
        """Cancel at once a job no worker ever claimed; flag a claimed one (its worker stops
        between chunks and finalizes it ``cancelled``); a terminal job stays as it is."""
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                current = await self._locked(conn, client_id, job_id)
                claimed = lifecycle.cancel_claimed(
                    leased=current["lease_expires_at"] is not None,
                    in_process=current["in_process"],
                    awaiting_apply=current["awaiting_apply"],
                )
                action = lifecycle.cancel_action(JobStatus(current["status"]), claimed=claimed)
                if action is lifecycle.CancelAction.NOW:
                    target = JobStatus.CANCELLED
                    sources = lifecycle.allowed_sources(target)
                    await finalize_on(conn, job_id, target, None, sources, None)
                elif action is lifecycle.CancelAction.REQUEST:
                    await conn.execute(self._q["request_cancel"], job_id)
        return await self.view_job(client_id, job_id)

    async def _locked(self, conn: Conn, client_id: int, job_id: uuid.UUID) -> asyncpg.Record:
        row = await conn.fetchrow(self._q["lock_client_job"], job_id, client_id)
        if row is None:
            raise JobNotFoundError(f"import {job_id} does not exist")
        return row

    def row_issues(self, job_id: uuid.UUID) -> AsyncIterator[RowIssue]:
        """The job's error report (see :func:`importer.adapters.postgres.jobs.row_issues`)."""
        return jobs.row_issues(self._pool, job_id)

    def duplicates(self, job_id: uuid.UUID) -> AsyncIterator[Competition]:
        """The job's duplicate report (:func:`.duplicates.duplicate_rows`)."""
        return duplicate_rows(self._pool, job_id)
