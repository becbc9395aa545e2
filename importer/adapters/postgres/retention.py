"""Retention on PostgreSQL (issue 15 point 4): the imports due, and one import's purge in one
transaction (``queries/retention.sql``)."""

from __future__ import annotations

import datetime as dt
import uuid

import asyncpg

from importer.adapters.postgres.columns import forget_on
from importer.adapters.postgres.pool import pooled, translated_errors
from importer.core import lifecycle
from importer.core.models import TERMINAL_STATUSES, Purged, RetentionDue
from importer.sql import queries


async def retention_due(pool: asyncpg.Pool, cutoff: dt.datetime, limit: int) -> list[RetentionDue]:
    with translated_errors():
        rows = await pool.fetch(
            queries()["retention_due"], cutoff, lifecycle.values(TERMINAL_STATUSES), limit
        )
    return [RetentionDue(r["id"], r["source"], r["local_path"]) for r in rows]


async def purge_job(pool: asyncpg.Pool, job_id: uuid.UUID, at: dt.datetime) -> Purged:
    with translated_errors():
        async with pooled(pool) as conn, conn.transaction():
            row = await conn.fetchrow(queries()["purge_job"], job_id, at)
            await forget_on(conn, job_id)  # its headers leave the client's memory
    assert row is not None
    return Purged(row["jobs"], row["raw_values"], row["journal_rows"], row["ledger_rows"])


async def sweep_outbox(
    pool: asyncpg.Pool, before: dt.datetime, limit: int, *, unpublished: bool
) -> int:
    """Delete at most ``limit`` outbox messages published before ``before`` (``unpublished``:
    and never published, created before it), in one transaction; how many."""
    with translated_errors():
        return int(await pool.fetchval(queries()["sweep_outbox"], before, limit, unpublished))


async def sweep_webhooks(pool: asyncpg.Pool, before: dt.datetime, limit: int) -> int:
    """Delete at most ``limit`` webhook deliveries that ended before ``before``, with their
    attempts, in one transaction; how many deliveries."""
    with translated_errors():
        return int(await pool.fetchval(queries()["sweep_webhooks"], before, limit))
