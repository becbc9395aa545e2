"""Who applies when: the client's import turn (imports of one client apply one at a time) and
a multi-instance job's lanes (each key partition's batches in chunk order). A base of
:class:`importer.adapters.postgres.store.PostgresStore`; a batch enters its lane in its own
transaction (:mod:`.batches`).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import asyncpg

from importer.adapters.postgres.pool import pooled, translated_errors
from importer.core.models import Batch, Job
from importer.sql import queries

_TURN_POLL_S = 0.2  # how often an import waiting for its client's turn looks again


class PostgresTurns:
    """The client's turn and the job's lanes (part of :class:`importer.ports.Store`)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._q = queries()

    @contextlib.asynccontextmanager
    async def client_turn(self, client_id: int, stop: asyncio.Event) -> AsyncIterator[bool]:
        """Hold the client's import turn while the body runs (True), or give up once ``stop``
        is set while waiting for it (False). The turn is a session advisory lock on a
        connection kept for the run: a dead process's turn ends with its connection."""
        with translated_errors():
            async with pooled(self._pool) as conn:
                while not await conn.fetchval(self._q["try_client_turn"], client_id):
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), _TURN_POLL_S)
                    if stop.is_set():
                        yield False
                        return
                try:
                    yield True
                finally:
                    await conn.execute(self._q["release_client_turn"], client_id)

    async def open_lanes(self, job_id: uuid.UUID, partitions: int) -> None:
        with translated_errors():
            await self._pool.execute(self._q["open_lanes"], job_id, partitions)

    async def advance_lane(self, job: Job, batch: Batch) -> bool:
        """Move the lane past a split batch once all its pieces are in; False if it had moved."""
        with translated_errors():
            moved = await self._pool.fetchval(
                self._q["advance_lane"], job.id, batch.partition, batch.chunk_no
            )
        return moved is not None

    async def lanes_behind(self, job_id: uuid.UUID) -> int | None:
        """The chunk every lane has passed (None: the job has no lanes)."""
        with translated_errors():
            value: int | None = await self._pool.fetchval(self._q["lanes_behind"], job_id)
        return value
