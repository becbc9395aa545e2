"""``importer db check``'s reads: the findings of core.legacy, streamed from the contact tables
(read-only, one repeatable-read transaction, cursors of a few thousand rows)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg

from importer.adapters.postgres.pool import translated_errors
from importer.core.legacy import LegacyRow, channel_finding, duplicate, key_finding
from importer.sql import queries

_PREFETCH = 5000


async def legacy_findings(dsn: str, client_id: int | None) -> AsyncIterator[LegacyRow]:
    """Every finding: the legacy duplicates, the invalid keys, the unnormalized channels."""
    sql = queries()
    with translated_errors():
        conn = await asyncpg.connect(dsn)
        try:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                for row in await conn.fetch(sql["check_key_duplicates"], client_id, None):
                    yield duplicate(
                        row["client_id"], row["key_form"], row["contact_ids"], row["stored_keys"]
                    )
                async for row in conn.cursor(sql["check_keys"], client_id, prefetch=_PREFETCH):
                    found = key_finding(row["client_id"], row["id"], row["cpf_cnpj"])
                    if found is not None:
                        yield found
                channels = conn.cursor(sql["check_channels"], client_id, prefetch=_PREFETCH)
                async for row in channels:
                    found = channel_finding(
                        row["client_id"],
                        row["contact_id"],
                        row["id"],
                        row["channel_id"],
                        row["value"],
                    )
                    if found is not None:
                        yield found
        finally:
            await conn.close()
