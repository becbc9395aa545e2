"""Completion webhooks on PostgreSQL (asyncpg): the deliveries the workers claim and record, the
clients' webhook settings, and the hook that writes a delivery in a caller's transaction."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from importer.adapters.postgres.outbox import OUTBOX_CHANNEL, translated_errors
from importer.adapters.postgres.pool import Conn, Listener
from importer.adapters.postgres.views import PostgresJobViews
from importer.core.models import JobView
from importer.core.webhooks import AttemptResult, ClientWebhook, DueDelivery, Outcome
from importer.sql import queries

# A pool that cannot hand out a connection fails the round (the delivery loop backs off).
_ACQUIRE_TIMEOUT_S = 30.0
_SESSION = {"application_name": "importer-webhooks"}


async def enqueue_webhook(conn: Conn, job_id: uuid.UUID, delivery_id: str, event: str) -> bool:
    """Write one delivery of ``event`` for ``job_id`` in the caller's transaction (the hook for
    events other than a finalization, which writes its own: the undo's ``import_undone``).
    False when the job has no target (no notify_url, no client default) or the id exists."""
    status = await conn.execute(queries()["enqueue_webhook"], job_id, delivery_id, event)
    return status.endswith(" 1")


def _webhook(row: asyncpg.Record | None) -> ClientWebhook | None:
    if row is None:
        return None
    return ClientWebhook(row["client_id"], row["secret"], row["notify_url"])


class PostgresClientWebhooks:
    """The clients' webhook settings (the owner sets them; a create reads them)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._q = queries()

    async def get(self, client_id: int) -> ClientWebhook | None:
        with translated_errors():
            return _webhook(await self._pool.fetchrow(self._q["get_client_webhook"], client_id))

    async def set(
        self, client_id: int, secret: str | None, notify_url: str | None, generated: str
    ) -> ClientWebhook:
        """Set the default target; ``secret`` replaces the secret (None keeps it, or stores
        ``generated`` for a client that had none)."""
        with translated_errors():
            row = await self._pool.fetchrow(
                self._q["set_client_webhook"], client_id, secret, notify_url, generated
            )
        webhook = _webhook(row)
        assert webhook is not None
        return webhook


class PostgresWebhooks:
    """The :class:`importer.ports.WebhookStore` on PostgreSQL."""

    def __init__(self, pool: asyncpg.Pool, *, dsn: str | None = None) -> None:
        """``dsn``: where :meth:`wait_for_deliveries` LISTENs (finalization writes its outbox
        rows in the transaction that writes the delivery, and the outbox's trigger notifies);
        without it, the waits are plain polls."""
        self._pool = pool
        self._views = PostgresJobViews(pool)
        self._listener = (
            Listener(dsn, OUTBOX_CHANNEL, server_settings=_SESSION) if dsn is not None else None
        )
        self._q = queries()

    async def claim_due(self, limit: int, lease_s: float) -> list[DueDelivery]:
        with translated_errors():
            async with self._pool.acquire(timeout=_ACQUIRE_TIMEOUT_S) as conn, conn.transaction():
                rows = await conn.fetch(self._q["claim_webhooks"], limit, float(lease_s))
        return [_due(row) for row in rows]

    async def job_document_body(self, delivery: DueDelivery, body: bytes) -> bytes:
        with translated_errors():
            stored = await self._pool.fetchval(
                self._q["freeze_webhook_body"], delivery.delivery_id, body.decode()
            )
        return str(stored).encode() if stored is not None else body

    async def job_view(self, job_id: uuid.UUID) -> JobView:
        return await self._views.view_job(None, job_id)

    async def record(
        self, delivery: DueDelivery, result: AttemptResult, outcome: Outcome, retry_in_s: float
    ) -> None:
        with translated_errors():
            await self._pool.execute(
                self._q["record_webhook_attempt"],
                delivery.delivery_id,
                delivery.attempt,
                result.status_code,
                result.error,
                result.duration_ms,
                outcome.value,
                float(retry_in_s),
            )

    async def wait_for_deliveries(self, timeout_s: float) -> None:
        if self._listener is None:
            await asyncio.sleep(timeout_s)
        else:
            await self._listener.wait(timeout_s)

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.close()


def _due(row: asyncpg.Record) -> DueDelivery:
    body = row["body"]
    return DueDelivery(
        delivery_id=row["delivery_id"],
        job_id=row["job_id"],
        client_id=row["client_id"],
        event=row["event"],
        url=row["url"],
        body=body.encode() if body is not None else None,
        attempt=row["attempts"],
        age_s=row["age_s"],
        secret=row["secret"],
    )
