"""An import's undo on PostgreSQL (issue 15): the decision on the locked job row, the conflict
check, then one bounded slice per transaction from the journal (``queries/undo.sql``): the
journey links the import made (issue 25), a batch's journal row, newest batch first, then the
merge marks; each slice consumes the journal rows it restores — what is left is the undo's
ledger. The undo holds the job's lease while it runs (each slice renews it); a failed step
fails the job with its reason (:meth:`PostgresUndo.fail_undo`).
"""

from __future__ import annotations

import uuid

import asyncpg
import structlog

from importer.adapters.postgres.columns import forget_on
from importer.adapters.postgres.pool import Conn, pooled, translated_errors
from importer.adapters.postgres.webhooks import enqueue_webhook
from importer.core import failpoints, lifecycle
from importer.core.config import DEFAULT_RETENTION_DAYS
from importer.core.errors import JobNotFoundError, LeaseLostError, UndoConflictError
from importer.core.models import JobStatus
from importer.sql import queries

SLICE_ROWS = 5000  # merge marks or journey links a slice takes (the journal: one batch's row)
CONFLICTS_SHOWN = 100
UNDO_LEASE_S = 60.0  # an undo's lease: each slice (bounded, well under it) renews it
STALE_UNDOS = 100  # undos with an expired lease a sweep fails at most
STALE_REASON = "undo_failed: interrupted (its process stopped: its lease expired)"

log = structlog.get_logger(__name__)


class PostgresUndo:
    """The :class:`importer.ports.UndoStore` on PostgreSQL."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        retention_days: int = DEFAULT_RETENTION_DAYS,
        lease_s: float = UNDO_LEASE_S,
    ) -> None:
        self._pool = pool
        self._q = queries()
        self._retention_days = retention_days
        self._lease_s = lease_s
        self._owner = f"undo:{uuid.uuid4()}"  # this undoer's lease
        # The journal's parts, in the order their slices run (query, takes the slice's size):
        # the journey links first, then the channels they point to can go.
        self._steps = (
            (self._q["undo_journey_links"], True),
            (self._q["undo_batch"], False),  # one batch's row, the newest left
            (self._q["undo_replaced"], True),
        )

    async def undo_client(self, client_id: int | None, job_id: uuid.UUID) -> int:
        """The job's client (its import turn is taken before the undo begins)."""
        with translated_errors():
            row = await self._pool.fetchrow(
                self._q["lock_undo"], job_id, client_id, self._retention_days
            )
        if row is None:
            raise JobNotFoundError(f"import {job_id} does not exist")
        return int(row["client_id"])

    async def begin_undo(self, client_id: int | None, job_id: uuid.UUID) -> lifecycle.UndoStart:
        """Decide on the locked row; check that nothing changed what the undo restores (a new
        undo: one that stopped half-way passed the check and resumes); enter ``undoing``."""
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                row = await conn.fetchrow(
                    self._q["lock_undo"], job_id, client_id, self._retention_days
                )
                if row is None:
                    raise JobNotFoundError(f"import {job_id} does not exist")
                status = JobStatus(row["status"])
                action = lifecycle.undo_action(
                    status,
                    journaled=row["journaled"],
                    data_removed=row["data_removed"],
                    expired=bool(row["expired"]),
                )
                start = lifecycle.UndoStart(job_id, row["client_id"], row["run_generation"], action)
                if action is lifecycle.UndoAction.NOTHING:
                    return start
                if status is not JobStatus.UNDOING:
                    await self._check(conn, job_id, row["finished_at"])
                moved = await conn.fetchval(
                    self._q["begin_undo"],
                    job_id,
                    lifecycle.values(lifecycle.UNDO_SOURCES),
                    self._owner,
                    self._lease_s,
                )
                assert moved is not None  # the locked row was in an undo's source status
                await conn.execute(self._q["cancel_undo_journey"], job_id)
        return start

    async def _check(self, conn: Conn, job_id: uuid.UUID, ended: object) -> None:
        """Refuse an undo its journey or another writer forbids (nothing undone yet)."""
        journey = await conn.fetchrow(self._q["lock_undo_journey"], job_id)
        if journey is not None:
            refusal = lifecycle.journey_refusal(journey["id"], journey["status"])
            if refusal is not None:
                raise refusal
        found = await conn.fetch(self._q["undo_conflicts"], job_id, ended, CONFLICTS_SHOWN)
        if found:
            raise _conflict(job_id, found)

    async def fail_undo(self, job_id: uuid.UUID, reason: str) -> None:
        """The undo's step failed: the job ends ``failed`` with ``reason``, its lease released
        (undoing it again resumes from the rest of its journal)."""
        with translated_errors():
            await self._pool.fetchval(self._q["fail_undo"], job_id, reason)

    async def fail_stale_undos(self) -> int:
        return await fail_stale_undos(self._pool)

    async def undo_slice(self, job_id: uuid.UUID) -> bool:
        """One slice in its own transaction: True while journal rows were left to restore;
        False once the last step (custom fields, undone, its notification) committed."""
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                renewed = await conn.fetchval(
                    self._q["renew_undo"], job_id, self._owner, self._lease_s
                )
                if renewed is None:
                    raise LeaseLostError(f"import {job_id}: its undo's lease was lost")
                for query, sized in self._steps:
                    args = (job_id, SLICE_ROWS) if sized else (job_id,)
                    row = await conn.fetchrow(query, *args)
                    if row is not None and row["slices"]:
                        await _reach(failpoints.UNDO_SLICE_BEFORE_COMMIT)
                        break
                else:
                    await conn.execute(self._q["undo_custom_fields"], job_id)
                    await conn.execute(self._q["undo_unused_fields"], job_id)
                    run = await conn.fetchval(self._q["end_undo"], job_id)
                    if run is not None:  # the webhook of the notification, same id
                        delivery = f"notification:{job_id}:undone:{run}"
                        await enqueue_webhook(conn, job_id, delivery, "import_undone")
                    await forget_on(conn, job_id)  # its headers leave the client's memory
                    return False
        await _reach(failpoints.UNDO_AFTER_SLICE)
        return True


async def fail_stale_undos(pool: asyncpg.Pool) -> int:
    """Fail the undos whose process stopped (an expired lease): no job rests in ``undoing``
    without a live lease; the owner undoes them again. How many."""
    with translated_errors():
        rows = await pool.fetch(queries()["fail_stale_undos"], STALE_REASON, STALE_UNDOS)
    if rows:
        log.warning("stale_undos_failed", count=len(rows), reason=STALE_REASON)
    return len(rows)


async def _reach(point: str) -> None:
    if failpoints.armed is not None:
        await failpoints.armed.reach(point)


def _conflict(job_id: uuid.UUID, found: list[asyncpg.Record]) -> UndoConflictError:
    conflicts = [(r["contact_id"], [str(j) for j in r["imports"]]) for r in found]
    later = sorted({j for _, jobs in conflicts for j in jobs})
    by = f"imports {', '.join(later[:5])}" if later else "another writer"
    return UndoConflictError(
        f"import {job_id}: {len(conflicts)}{'+' if len(conflicts) >= CONFLICTS_SHOWN else ''}"
        f" of its contacts were changed since by {by}: undo the later imports first",
        conflicts,
    )
