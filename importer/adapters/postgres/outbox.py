"""The outbox on PostgreSQL (asyncpg): what the relay reads, locks and marks published."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence

import asyncpg

from importer.adapters.postgres import pool as postgres_pool
from importer.core.errors import TransientStoreError
from importer.core.models import OutboxMessage
from importer.sql import queries

OUTBOX_CHANNEL = "importer_outbox"  # schema.sql's trigger notifies it after an insert into outbox
# A pool that cannot hand out a connection fails the relay's round (it backs off and retries).
_ACQUIRE_TIMEOUT_S = 30.0
_SESSION = {"application_name": "importer"}  # the operators' pg_terminate_backend finds it


@contextlib.contextmanager
def translated_errors() -> Iterator[None]:
    """The pool's translation, plus asyncpg's InternalClientError: an idle pool connection the
    server terminated (``pg_terminate_backend``, a restart) can raise it on its next use."""
    try:
        with postgres_pool.translated_errors():
            yield
    except asyncpg.exceptions.InternalClientError as exc:
        raise TransientStoreError(f"{type(exc).__name__}: {exc}") from exc


class PostgresOutbox:
    """The :class:`importer.ports.Outbox` on PostgreSQL."""

    def __init__(self, pool: asyncpg.Pool, *, dsn: str | None = None) -> None:
        """``dsn``: where :meth:`wait_for_messages` LISTENs (its own connection); without it,
        the waits are plain polls."""
        self._pool = pool
        self._listener = (
            postgres_pool.Listener(dsn, OUTBOX_CHANNEL, server_settings=_SESSION)
            if dsn is not None
            else None
        )
        self._q = queries()

    async def publish_pending(
        self,
        limit: int,
        topics: Sequence[str],
        publish: Callable[[Sequence[OutboxMessage]], Awaitable[Collection[int]]],
    ) -> int:
        """See :meth:`importer.ports.Outbox.publish_pending`. The rows stay locked while
        ``publish`` runs: a crash before the commit leaves them unpublished (re-published later
        under the same message ids: at least once)."""
        with translated_errors():
            async with self._pool.acquire(timeout=_ACQUIRE_TIMEOUT_S) as conn, conn.transaction():
                rows = await conn.fetch(self._q["lock_outbox"], list(topics), limit)
                if not rows:
                    return 0
                published = await publish([_message(row) for row in rows])
                if published:
                    await conn.execute(self._q["mark_outbox_published"], sorted(published))
        return len(rows)

    async def unknown_topics(self, topics: Sequence[str]) -> dict[str, int]:
        with translated_errors():
            rows = await self._pool.fetch(self._q["unknown_outbox_topics"], list(topics))
        return {row["topic"]: row["messages"] for row in rows}

    async def wait_for_messages(self, timeout_s: float) -> None:
        """Return when a notification came since the last call (or meanwhile), or after the
        timeout. A dropped LISTEN connection wakes the waiter; the next call reconnects."""
        if self._listener is None:
            await asyncio.sleep(timeout_s)
        else:
            await self._listener.wait(timeout_s)

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.close()


def _message(row: asyncpg.Record) -> OutboxMessage:
    return OutboxMessage(row["id"], row["message_id"], row["topic"], row["payload"].encode())
