"""The workers' queue on PostgreSQL: the :class:`importer.ports.JobQueue`.

Jobs are claimed under a lease (``FOR UPDATE SKIP LOCKED``, fair per client), renewed,
released, taken over for a resume; a worker waits for queued jobs on ``LISTEN importer_jobs``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import asyncpg

from importer.adapters.postgres import jobs, retention, undo
from importer.adapters.postgres.jobs import admin_locked, refuse_requeue
from importer.adapters.postgres.pool import Listener, pooled, translated_errors, wait_cleared
from importer.adapters.postgres.records import job_from_row
from importer.adapters.postgres.store import PostgresStore
from importer.core import lifecycle
from importer.core.config import DEFAULT_MAX_ROW_ERRORS
from importer.core.models import Job, LeaseState, Purged, RetentionDue

_CLAIM_LOCK = 0x1A4F0002  # advisory lock id serializing job claims (exact fair-share counts)
JOBS_CHANNEL = "importer_jobs"  # start_job notifies it (payload: the job id); workers LISTEN
_CLAIMABLE = lifecycle.values(lifecycle.CLAIMABLE_STATUSES)


class PostgresJobQueue(PostgresStore):
    """The :class:`importer.ports.JobQueue`: the store a worker (or the CLI's own run) uses,
    plus the job's lease."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        dsn: str | None = None,
        compiled: bool = True,
        max_row_errors: int = DEFAULT_MAX_ROW_ERRORS,
    ) -> None:
        """``dsn``: where :meth:`wait_for_jobs` opens its own LISTEN connection (workers only);
        ``compiled`` and ``max_row_errors``: as :class:`PostgresStore`'s."""
        super().__init__(pool, compiled=compiled, max_row_errors=max_row_errors)
        self._listener = Listener(dsn, JOBS_CHANNEL) if dsn is not None else None

    async def claim_job(self, owner: str, lease_s: float, max_per_client: int) -> Job | None:
        """Lease the oldest claimable job to ``owner`` (see the claim_job query)."""
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                await conn.execute(self._q["claim_lock"], _CLAIM_LOCK)
                row = await conn.fetchrow(
                    self._q["claim_job"], owner, float(lease_s), max_per_client, _CLAIMABLE
                )
        return None if row is None else job_from_row(row)

    async def renew_lease(self, job_id: uuid.UUID, owner: str, lease_s: float) -> LeaseState:
        with translated_errors():
            row = await self._pool.fetchrow(self._q["renew_lease"], job_id, owner, float(lease_s))
        if row is None:
            return LeaseState(held=False, cancel_requested=False)
        return LeaseState(held=True, cancel_requested=row["cancel_requested"])

    async def release_lease(self, job_id: uuid.UUID, owner: str) -> None:
        with translated_errors():
            await self._pool.execute(self._q["release_lease"], job_id, owner)

    async def take_over_job(
        self, job_id: uuid.UUID, owner: str, lease_s: float, operation_id: str
    ) -> Job:
        """Lease an ended or abandoned job to ``owner`` for its next run in that process (see
        the take_over_job query), deciding on the locked row."""
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                refuse_requeue(await admin_locked(conn, None, job_id))
                row = await conn.fetchrow(
                    self._q["take_over_job"],
                    job_id,
                    lifecycle.ended_values(),
                    owner,
                    float(lease_s),
                    operation_id,
                )
        assert row is not None  # the locked row exists
        return job_from_row(row)

    async def apply_preview(self, job_id: uuid.UUID, operation_id: str | None = None) -> None:
        """Hand a resting preview to its next run (see :func:`.jobs.apply_preview`)."""
        await jobs.apply_preview(self._pool, job_id, None, operation_id)

    async def expire_previews(self) -> int:
        return await jobs.expire_previews(self._pool)

    async def fail_stale_undos(self) -> int:
        return await undo.fail_stale_undos(self._pool)

    async def retention_due(self, cutoff: dt.datetime, limit: int) -> list[RetentionDue]:
        return await retention.retention_due(self._pool, cutoff, limit)

    async def purge_job(self, job_id: uuid.UUID, at: dt.datetime) -> Purged:
        return await retention.purge_job(self._pool, job_id, at)

    async def sweep_outbox(self, before: dt.datetime, limit: int, *, unpublished: bool) -> int:
        return await retention.sweep_outbox(self._pool, before, limit, unpublished=unpublished)

    async def sweep_webhooks(self, before: dt.datetime, limit: int) -> int:
        return await retention.sweep_webhooks(self._pool, before, limit)

    async def wait_for_jobs(self, timeout_s: float) -> None:
        """Return when a job was queued since the last call (or meanwhile), or after the timeout.

        With the queue's ``dsn``, the LISTEN connection is the queue's own, opened on the first
        call and kept until :meth:`close`; if it drops, the waiter wakes (a notification may
        have been lost) and the next call reconnects. Without it, each call LISTENs on a pool
        connection for its own duration (a job queued between two calls waits for the next
        poll).
        """
        if self._listener is None:
            await self._wait_on_pool(timeout_s)
        else:
            await self._listener.wait(timeout_s)

    async def _wait_on_pool(self, timeout_s: float) -> None:
        queued = asyncio.Event()

        def on_queued(*_notification: object) -> None:
            queued.set()

        with translated_errors():
            async with pooled(self._pool) as conn:
                await conn.add_listener(JOBS_CHANNEL, on_queued)
                try:
                    await wait_cleared(queued, timeout_s)
                finally:  # the pool's reset does not UNLISTEN (see pool._keep_session)
                    await conn.remove_listener(JOBS_CHANNEL, on_queued)

    async def close(self) -> None:
        """Close the LISTEN connection, if any (the pool belongs to the caller)."""
        if self._listener is not None:
            await self._listener.close()
