"""The columns step on PostgreSQL (``queries/columns.sql``): the client's custom fields and
memory, a job's mapping, and the memory's updates at a job's completion, removal and purge.

Every statement takes the tenant's ``client_id`` (or a job, whose client it uses).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

import asyncpg
import orjson

from importer.adapters.postgres.pool import Conn, translated_errors
from importer.core import lifecycle
from importer.core.columns import CustomField, MemoryEntry
from importer.core.models import JobStatus
from importer.sql import queries

# A client has at most max_columns fields per import, and rarely more than a few thousand in all;
# the cap keeps one answer bounded.
MAX_CUSTOM_FIELDS = 5000
MAX_MEMORY_ENTRIES = 20000
# The statuses a job's columns may still be mapped in: its file not read by a run yet.
MAPPABLE = (JobStatus.UPLOADING, JobStatus.UPLOADED)


class PostgresColumns:
    """The :class:`importer.ports.ColumnStore` on PostgreSQL."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._q = queries()

    async def custom_fields(self, client_id: int) -> tuple[CustomField, ...]:
        with translated_errors():
            rows = await self._pool.fetch(
                self._q["client_custom_fields"], client_id, MAX_CUSTOM_FIELDS
            )
        return tuple(CustomField(r["id"], r["name"]) for r in rows)

    async def memory(self, client_id: int) -> list[MemoryEntry]:
        with translated_errors():
            rows = await self._pool.fetch(
                self._q["client_column_memory"], client_id, MAX_MEMORY_ENTRIES
            )
        return [
            MemoryEntry(r["header_key"], r["target"], r["uses"], r["last_used_at"]) for r in rows
        ]

    async def set_mapping(
        self,
        client_id: int,
        job_id: uuid.UUID,
        layout: Mapping[str, object],
        pairs: Sequence[tuple[str, str]],
    ) -> bool:
        with translated_errors():
            row = await self._pool.fetchrow(
                self._q["set_job_columns"],
                job_id,
                client_id,
                lifecycle.values(MAPPABLE),
                orjson.dumps(layout).decode(),
                orjson.dumps([list(p) for p in pairs]).decode(),
            )
        return row is not None

    async def clear_memory(self, client_id: int) -> int:
        with translated_errors():
            status = await self._pool.execute(self._q["clear_column_memory"], client_id)
        return int(status.rsplit(" ", 1)[-1])


async def remember_on(conn: Conn, job_id: uuid.UUID) -> None:
    """In a completed finalization's transaction: the job's mapping into its client's memory."""
    await conn.execute(queries()["remember_job_columns"], job_id)


async def forget_on(conn: Conn | asyncpg.Pool, job_id: uuid.UUID) -> None:
    """The job's mapping out of its client's memory (remove-data, retention); once."""
    await conn.execute(queries()["forget_job_columns"], job_id)
