"""PostgreSQL adapter (asyncpg): the only module that talks to the database driver.

Driver errors are translated once, here: connection losses, deadlocks, serialization failures
and lock or statement time-outs become :class:`TransientStoreError`, anything else
:class:`StoreError`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import asyncpg
import orjson

from importer import lifecycle, merge
from importer.exceptions import (
    IllegalTransitionError,
    JobNotFoundError,
    StoreError,
    TransientStoreError,
)
from importer.models import (
    Batch,
    Channel,
    ConflictStrategy,
    ContactRow,
    Counters,
    InputFormat,
    Job,
    JobStatus,
    Reason,
    RowIssue,
    Severity,
)
from importer.ports import Finalized, NewJob
from importer.sql import queries, schema

_TRANSIENT = (
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.LockNotAvailableError,
    asyncpg.exceptions.QueryCanceledError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.CannotConnectNowError,
    # A concurrent import of the same client inserted one of our new keys first: the retry
    # finds it stored and merges into it.
    asyncpg.exceptions.UniqueViolationError,
    ConnectionError,
    OSError,
    TimeoutError,
)

_MIGRATION_LOCK = 0x1A4F0001  # advisory lock id serializing concurrent `db migrate` runs

_CONTACT = ("id", "client_id", "cpf_cnpj", "name", "street_address", "import_job_id")
_DETAIL = ("contact_id", "client_id", "channel_id", "value", "country_code", "country")
_CUSTOM = ("contact_id", "client_id", "custom_field_id", "value")
_ROW_ERROR = ("job_id", "line", "column_name", "reason", "severity", "value")


@contextlib.contextmanager
def translated_errors() -> Iterator[None]:
    """Translate driver errors into the importer's own, once, at the boundary."""
    try:
        yield
    except _TRANSIENT as exc:
        raise TransientStoreError(f"{type(exc).__name__}: {exc}") from exc
    except asyncpg.PostgresError as exc:
        raise StoreError(f"{type(exc).__name__}: {exc}") from exc


async def connect_pool(dsn: str, size: int) -> asyncpg.Pool:
    """A pool of connections set up for batch transactions (see ``init_connection``)."""
    with translated_errors():
        pool = await asyncpg.create_pool(
            dsn,
            min_size=1,
            max_size=size,
            init=_init_connection,
            server_settings={"application_name": "importer"},
        )
    assert pool is not None
    return pool


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.execute(queries()["init_connection"])


async def migrate(dsn: str) -> None:
    """Apply ``schema.sql`` (idempotent), serialized by an advisory lock."""
    with translated_errors():
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("SET client_min_messages = warning")
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
                await conn.execute(schema())
        finally:
            await conn.close()


def _now() -> dt.datetime:
    """The application clock: finalization times come from here, not from the database."""
    return dt.datetime.now(dt.UTC)


class PostgresStore:
    """The :class:`importer.ports.Store` on PostgreSQL."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._q = queries()
        self._field_ids: dict[tuple[int, str], int] = {}  # (client, lower(name)) → id
        self._field_names: dict[int, str] = {}  # id → lower(name)

    # --- jobs ---------------------------------------------------------------------------------

    async def create_job(self, new_job: NewJob, status: JobStatus) -> Job:
        layout = orjson.dumps(new_job.layout).decode() if new_job.layout is not None else None
        with translated_errors():
            await self._pool.execute(
                self._q["insert_job"], new_job.id, new_job.client_id, new_job.user_id,
                status.value, new_job.source, new_job.input_format, layout, new_job.strategy,
                new_job.chunk_size, new_job.partitions, new_job.has_internationalization,
                new_job.bytes_total, new_job.journey_id, new_job.auto_start_journey_mailing,
            )
        return await self.get_job(new_job.id)

    async def get_job(self, job_id: uuid.UUID) -> Job:
        with translated_errors():
            row = await self._pool.fetchrow(self._q["get_job"], job_id)
        if row is None:
            raise JobNotFoundError(f"import {job_id} does not exist")
        return job_from_row(row)

    async def transition(self, job_id: uuid.UUID, target: JobStatus) -> None:
        with translated_errors():
            moved = await self._pool.fetchval(
                self._q["transition_job"], job_id, target.value, lifecycle.allowed_sources(target)
            )
        if moved is None:
            current = (await self.get_job(job_id)).status
            raise IllegalTransitionError(f"import {job_id}: {current.value} → {target.value}")

    async def finalize(self, job_id: uuid.UUID, fail_reason: str | None) -> Finalized | None:
        target = JobStatus.FAILED if fail_reason is not None else JobStatus.COMPLETED
        with translated_errors():
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute(self._q["synchronous_commit"])
                row = await conn.fetchrow(
                    self._q["finalize_job"], job_id, target.value, fail_reason, _now(),
                    lifecycle.allowed_sources(target),
                )
        if row is None:
            return None
        counters = Counters(*(row[k] for k in
                              ("rows_read", "inserted", "updated", "invalid", "error", "ignored")))
        return Finalized(JobStatus(row["status"]), counters)

    async def ensure_custom_fields(self, job: Job, names: Sequence[str]) -> int:
        with translated_errors():
            created = len(await self._pool.fetch(
                self._q["create_custom_fields"], job.client_id, list(names), job.id))
            if created:
                await self._pool.execute(self._q["record_created_fields"], job.id, created)
            rows = await self._pool.fetch(self._q["custom_field_ids"], job.client_id, list(names))
        for row in rows:
            self._field_ids[(job.client_id, row["key"])] = row["id"]
            self._field_names[row["id"]] = row["key"]
        return created

    async def done_batches(self, job_id: uuid.UUID) -> frozenset[tuple[int, int]]:
        with translated_errors():
            rows = await self._pool.fetch(self._q["done_batches"], job_id)
        return frozenset((r["chunk_no"], r["partition"]) for r in rows)

    # --- batches ------------------------------------------------------------------------------

    async def apply_batch(self, job: Job, batch: Batch) -> Counters | None:
        with translated_errors():
            async with self._pool.acquire() as conn, conn.transaction():
                if not await self._claim(conn, job, batch):
                    return None
                new_keys = await self._write_rows(conn, job, batch.rows) if batch.rows else 0
                await self._write_issues(conn, job.id, batch.issues)
                counters = lifecycle.batch_counters(batch, job.strategy, new_keys)
                await self._complete(conn, job, batch, "done", counters, 1, None)
        return counters

    async def discard_batch(self, job: Job, batch: Batch, attempts: int, error: str) -> None:
        lost = tuple(
            RowIssue(r.line, None, Reason.CHUNK_DISCARDED, error[:1024], Severity.ERROR)
            for r in batch.rows
        )
        with translated_errors():
            async with self._pool.acquire() as conn, conn.transaction():
                if not await self._claim(conn, job, batch):
                    return
                await self._write_issues(conn, job.id, batch.issues + lost)
                counters = lifecycle.discarded_counters(batch)
                await self._complete(conn, job, batch, "discarded", counters, attempts, error)

    async def _claim(self, conn: asyncpg.Connection, job: Job, batch: Batch) -> bool:
        claimed = await conn.fetchval(
            self._q["claim_batch"], job.id, batch.chunk_no, batch.partition, batch.first_line,
            batch.end_offset,
        )
        return claimed is not None

    async def _complete(
        self, conn: asyncpg.Connection, job: Job, batch: Batch, status: str,
        counters: Counters, attempts: int, error: str | None,
    ) -> None:
        await conn.execute(
            self._q["complete_batch"], job.id, batch.chunk_no, batch.partition, status,
            counters.rows_read, counters.inserted, counters.updated, counters.invalid,
            counters.error, counters.ignored, attempts, error,
        )

    async def _write_rows(
        self, conn: asyncpg.Connection, job: Job, rows: Sequence[ContactRow]
    ) -> int:
        """Decide the batch's writes from the locked stored state, then make only those."""
        folded = merge.fold_rows(rows, job.strategy)
        keys = sorted(folded)
        if job.strategy is ConflictStrategy.MERGE:
            found = await conn.fetch(self._q["lock_contacts"], job.client_id, keys)
        else:
            found = await conn.fetch(self._q["find_contacts"], job.client_id, keys)
        stored = {r["cpf_cnpj"]: merge.StoredContact(r["id"], r["name"], r["street_address"])
                  for r in found}
        details, custom = await self._stored_values(conn, job, stored)
        plan = merge.plan_batch(folded, job.strategy, stored, details, custom)
        await self._insert_contacts(conn, job, plan.new_contacts)
        await self._apply_changes(conn, job, plan)
        return plan.new_keys

    async def _stored_values(
        self, conn: asyncpg.Connection, job: Job, stored: dict[str, merge.StoredContact]
    ) -> tuple[dict[int, set[tuple[Channel, str]]], dict[tuple[int, str], str]]:
        """Channels and custom values of the stored contacts (MERGE needs them to diff)."""
        details: dict[int, set[tuple[Channel, str]]] = {}
        custom: dict[tuple[int, str], str] = {}
        if job.strategy is not ConflictStrategy.MERGE or not stored:
            return details, custom
        ids = [c.id for c in stored.values()]
        for r in await conn.fetch(self._q["details_of"], ids):
            details.setdefault(r["contact_id"], set()).add((Channel(r["channel_id"]), r["value"]))
        names = self._field_names
        for r in await conn.fetch(self._q["custom_values_of"], ids):
            name = names.get(r["custom_field_id"])
            if name is not None:
                custom[(r["contact_id"], name)] = r["value"]
        return details, custom

    async def _insert_contacts(
        self, conn: asyncpg.Connection, job: Job, contacts: Sequence[merge.MergedContact]
    ) -> None:
        """COPY new contacts, their channels and custom values straight into the tables."""
        if not contacts:
            return
        ids = [r[0] for r in await conn.fetch(self._q["next_contact_ids"], len(contacts))]
        client, field_ids = job.client_id, self._field_ids
        contact_rows: list[tuple[Any, ...]] = []
        detail_rows: list[tuple[Any, ...]] = []
        custom_rows: list[tuple[Any, ...]] = []
        for contact_id, c in zip(ids, contacts, strict=True):
            contact_rows.append((contact_id, client, c.key, c.name, c.street_address, job.id))
            detail_rows.extend(
                (contact_id, client, d.channel.value, d.value, d.country_code, d.country)
                for d in c.details.values())
            custom_rows.extend((contact_id, client, field_ids[(client, lower)], value)
                               for lower, (_, value) in c.custom_fields.items())
        await conn.copy_records_to_table("contact", records=contact_rows, columns=_CONTACT)
        if detail_rows:
            await conn.copy_records_to_table("contact_details", records=detail_rows, columns=_DETAIL)
        if custom_rows:
            await conn.copy_records_to_table(
                "contact_custom_fields", records=custom_rows, columns=_CUSTOM)

    async def _apply_changes(self, conn: asyncpg.Connection, job: Job, plan: merge.BatchPlan) -> None:
        """MERGE into stored contacts: only the values that change."""
        client, field_ids = job.client_id, self._field_ids
        if plan.contact_updates:
            ids, names, addresses = zip(*plan.contact_updates, strict=True)
            await conn.execute(self._q["update_contacts"], ids, names, addresses)
        if plan.detail_inserts:
            rows = [(cid, client, d.channel.value, d.value, d.country_code, d.country)
                    for cid, d in plan.detail_inserts]
            await conn.copy_records_to_table("contact_details", records=rows, columns=_DETAIL)
        if plan.custom_inserts:
            rows = [(cid, client, field_ids[(client, name.lower())], value)
                    for cid, name, value in plan.custom_inserts]
            await conn.copy_records_to_table("contact_custom_fields", records=rows, columns=_CUSTOM)
        if plan.custom_updates:
            cids = [cid for cid, _, _ in plan.custom_updates]
            fids = [field_ids[(client, name.lower())] for _, name, _ in plan.custom_updates]
            values = [value for _, _, value in plan.custom_updates]
            await conn.execute(self._q["update_custom_values"], cids, fids, values)

    async def _write_issues(
        self, conn: asyncpg.Connection, job_id: uuid.UUID, issues: Sequence[RowIssue]
    ) -> None:
        if not issues:
            return
        records = [
            (job_id, i.line, i.column, i.reason.value, i.severity.value, _text(i.value))
            for i in issues
        ]
        await conn.copy_records_to_table("import_row_error", records=records, columns=_ROW_ERROR)

    # --- reports ------------------------------------------------------------------------------

    async def row_issues(self, job_id: uuid.UUID) -> AsyncIterator[RowIssue]:
        with translated_errors():
            async with self._pool.acquire() as conn, conn.transaction():
                async for r in conn.cursor(self._q["row_errors"], job_id, prefetch=2000):
                    yield RowIssue(r["line"], r["column_name"], Reason(r["reason"]), r["value"],
                                   Severity(r["severity"]))


def _text(value: str | None) -> str | None:
    """Text safe for a PostgreSQL text column (no NUL; undecodable surrogates escaped)."""
    if value is None:
        return None
    cleaned = value.replace("\x00", "\\x00")
    return cleaned.encode("utf-8", "backslashreplace").decode("utf-8")


def job_from_row(row: asyncpg.Record) -> Job:
    counters = Counters(*(row[k] for k in
                          ("rows_read", "inserted", "updated", "invalid", "error", "ignored")))
    return Job(
        id=row["id"],
        client_id=row["client_id"],
        status=JobStatus(row["status"]),
        strategy=ConflictStrategy(row["conflict_strategy"]),
        source=row["source"],
        input_format=InputFormat(row["input_format"]),
        chunk_size=row["chunk_size"],
        partitions=row["partitions"],
        user_id=row["user_id"],
        fail_reason=row["fail_reason"],
        counters=counters,
    )
