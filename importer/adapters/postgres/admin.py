"""The owner's operations on PostgreSQL (seed 001's runbook): the
:class:`importer.services.admin.AdminStore`.

``client_id`` None: the command line, whose operator acts on any client's job.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

from importer.adapters.postgres.columns import forget_on
from importer.adapters.postgres.jobs import admin_locked, refuse_requeue
from importer.adapters.postgres.pool import pooled, translated_errors
from importer.adapters.postgres.records import now
from importer.core import lifecycle
from importer.core.models import JobStatus, RemovedData, Requeued
from importer.sql import queries


class PostgresAdmin:
    """Requeue an ended job, remove an import's data, look up jobs' statuses."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._q = queries()

    async def requeue_job(
        self, client_id: int | None, job_id: uuid.UUID, operation_id: str
    ) -> Requeued:
        """An ended job back to ``queued`` as its next run (see the requeue_job query)."""
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                current = await admin_locked(conn, client_id, job_id)
                data_removed = current["data_removed"]
                refuse_requeue(current)
                row = await conn.fetchrow(
                    self._q["requeue_job"],
                    job_id,
                    client_id,
                    lifecycle.requeue_sources(data_removed),
                    operation_id,
                    lifecycle.ended_values(),
                )
        assert row is not None  # the locked row was in an allowed status
        return Requeued(
            job_id, current["client_id"], row["run_generation"], row["finalizations_removed"]
        )

    async def remove_job_data(self, client_id: int | None, job_id: uuid.UUID) -> RemovedData:
        """Soft-delete the contacts an ended import created, and clear its ledger, lanes and
        per-row report, in one transaction; a repeat removes nothing more."""
        removed_at = now()
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                current = await admin_locked(conn, client_id, job_id)
                refusal = lifecycle.removal_refusal(JobStatus(current["status"]))
                if refusal is not None:
                    raise refusal
                owner = current["client_id"]
                contacts = await conn.fetchrow(
                    self._q["remove_job_contacts"], job_id, owner, removed_at
                )
                keyless = await conn.fetchrow(
                    self._q["remove_job_contacts_without_cpf"], job_id, owner, removed_at
                )
                ledger = await conn.fetchrow(self._q["clear_job_ledger"], job_id)
                marked = await conn.fetchrow(self._q["mark_data_removed"], job_id, removed_at)
                await forget_on(conn, job_id)  # its headers leave the client's memory
        assert contacts is not None
        assert keyless is not None
        assert ledger is not None
        assert marked is not None
        return RemovedData(
            job_id,
            owner,
            contacts=contacts["contacts"] + keyless["contacts"],
            details=contacts["details"] + keyless["details"],
            chunks=ledger["chunks"],
            row_errors=ledger["row_errors"],
            removed_at=marked["data_removed_at"],
        )

    async def job_statuses(
        self, client_id: int | None, job_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, tuple[int, JobStatus]]:
        """job id → (client, status) of the given jobs that exist (for ``client_id``)."""
        with translated_errors():
            rows = await self._pool.fetch(self._q["job_statuses"], list(job_ids), client_id)
        return {r["id"]: (r["client_id"], JobStatus(r["status"])) for r in rows}
