"""PostgreSQL (asyncpg) for what the HTTP API adds: layouts, journeys, firing intents.

Every statement takes the tenant's ``client_id`` first: another tenant's row is not found.
Driver errors are translated by the pool's :func:`translated_errors`.
"""

from __future__ import annotations

from collections.abc import Mapping

import asyncpg
import orjson

from importer.adapters.postgres.jobs import insert_job
from importer.adapters.postgres.pool import translated_errors
from importer.adapters.postgres.webhooks import PostgresClientWebhooks
from importer.core.errors import LayoutNotFoundError
from importer.core.layout import parse_layout
from importer.core.models import JobStatus, NewJob, StoredLayout
from importer.core.options import FiringIntent
from importer.core.webhooks import ClientWebhook
from importer.sql import queries

# A tenant's layouts are a short list a form picks from; the cap keeps one answer bounded.
MAX_LAYOUTS = 1000
# A pool that cannot hand out a connection fails the request instead of hanging it.
ACQUIRE_TIMEOUT_S = 30.0
# A probe that hangs is a database that is not ready.
PING_TIMEOUT_S = 2.0


def _layout(row: asyncpg.Record | None, layout_id: int | None = None) -> StoredLayout:
    if row is None:
        raise LayoutNotFoundError(f"layout {layout_id} does not exist")
    return StoredLayout(
        id=row["id"],
        name=row["name"],
        document=orjson.loads(row["document"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _mirrored(document: Mapping[str, object]) -> tuple[str | None, str | None, bool]:
    """The columns the seed's readers use: delimiter, encoding, header flag."""
    layout = parse_layout(document)
    return layout.delimiter, layout.encoding, layout.has_header


class CatalogStore:
    """The :class:`importer.ports.CatalogStore` on PostgreSQL."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._q = queries()

    async def ping(self) -> None:
        with translated_errors():
            await self._pool.fetchval(self._q["ping"], timeout=PING_TIMEOUT_S)

    async def journey_exists(self, client_id: int, journey_id: int) -> bool:
        with translated_errors():
            return bool(await self._pool.fetchval(self._q["journey_exists"], client_id, journey_id))

    async def client_webhook(self, client_id: int) -> ClientWebhook | None:
        return await PostgresClientWebhooks(self._pool).get(client_id)

    async def create_linked_job(
        self, new_job: NewJob, status: JobStatus, intent: FiringIntent | None
    ) -> None:
        with translated_errors():
            async with self._pool.acquire(timeout=ACQUIRE_TIMEOUT_S) as conn, conn.transaction():
                await insert_job(conn, new_job, status)
                if new_job.journey_id is not None:
                    await conn.execute(
                        self._q["insert_journey_classification"],
                        new_job.journey_id,
                        new_job.client_id,
                        new_job.id,
                        new_job.filename,
                        bool(new_job.auto_start_journey_mailing),
                    )
                if intent is not None:
                    await conn.execute(
                        self._q["insert_firing_intent"],
                        new_job.client_id,
                        intent.kind,
                        new_job.id,
                        orjson.dumps(intent.params).decode(),
                    )

    # --- layouts ------------------------------------------------------------------------------

    async def create_layout(
        self, client_id: int, name: str, document: Mapping[str, object]
    ) -> StoredLayout:
        with translated_errors():
            row = await self._pool.fetchrow(
                self._q["insert_layout"],
                client_id,
                name,
                *_mirrored(document),
                orjson.dumps(document).decode(),
            )
        return _layout(row)

    async def get_layout(self, client_id: int, layout_id: int) -> StoredLayout:
        with translated_errors():
            row = await self._pool.fetchrow(self._q["get_layout"], client_id, layout_id)
        return _layout(row, layout_id)

    async def list_layouts(self, client_id: int) -> list[StoredLayout]:
        with translated_errors():
            rows = await self._pool.fetch(self._q["list_layouts"], client_id, MAX_LAYOUTS)
        return [_layout(row) for row in rows]

    async def update_layout(
        self, client_id: int, layout_id: int, name: str, document: Mapping[str, object]
    ) -> StoredLayout:
        with translated_errors():
            row = await self._pool.fetchrow(
                self._q["update_layout"],
                client_id,
                layout_id,
                name,
                *_mirrored(document),
                orjson.dumps(document).decode(),
            )
        return _layout(row, layout_id)

    async def delete_layout(self, client_id: int, layout_id: int) -> None:
        with translated_errors():
            deleted = await self._pool.fetchval(self._q["delete_layout"], client_id, layout_id)
        if deleted is None:
            raise LayoutNotFoundError(f"layout {layout_id} does not exist")
