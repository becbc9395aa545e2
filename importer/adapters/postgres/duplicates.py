"""The duplicate-resolution report on PostgreSQL (``import_duplicate``): a batch's competitions
written in its own transaction as one JSON array (its bytes), and the report read back, each
(key, field) combined over its batches (``core.duplicates``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterable, AsyncIterator, Sequence

import asyncpg
import orjson

from importer.adapters.postgres.pool import Conn, pooled, translated_errors
from importer.core import duplicates
from importer.core.duplicates import Competition, CompetitionRow, SourceRow
from importer.core.models import Batch
from importer.sql import queries


async def write_duplicates(
    conn: Conn,
    job_id: uuid.UUID,
    batch: Batch,
    found: Sequence[CompetitionRow],
    sources: Sequence[SourceRow] = (),
) -> None:
    """One row for the batch's competitions and sources, ordered for the report by (chunk, the
    batch's first line: a piece of a split batch has its own)."""
    document = orjson.dumps(found)  # bytes: the server stores them unparsed
    lines = orjson.dumps(sources) if sources else None
    await conn.execute(
        queries()["insert_duplicates"], job_id, batch.chunk_no, batch.rows[0].line, document, lines
    )


async def duplicate_rows(pool: asyncpg.Pool, job_id: uuid.UUID) -> AsyncIterator[Competition]:
    """The duplicate report's rows by key and field, each combined over its batches."""
    with translated_errors():
        async with pooled(pool) as conn, conn.transaction():
            cursor = conn.cursor(queries()["duplicate_rows"], job_id, prefetch=2000)
            async for competition in duplicates.combined_stream(_competitions(cursor)):
                yield competition


async def _competitions(cursor: AsyncIterable[asyncpg.Record]) -> AsyncIterator[Competition]:
    async for r in cursor:
        yield Competition(
            r["key"],
            r["field"],
            r["winner_value"],
            r["winner_line"],
            tuple(orjson.loads(r["losing_lines"])),
            r["loser_stored"],
            r["rule"],
        )
