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
from asyncpg.pool import PoolConnectionProxy

from importer import lifecycle, merge
from importer.exceptions import (
    BatchAlreadyAppliedError,
    IllegalTransitionError,
    JobNotFoundError,
    StoreError,
    TransientStoreError,
)
from importer.models import (
    Batch,
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

# A pool's connection proxy or a plain connection.
Conn = asyncpg.Connection | PoolConnectionProxy

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

_ID_BLOCK = 4096  # contact ids reserved per sequence round trip
_ACQUIRE_TIMEOUT_S = 60.0  # a pool that cannot reconnect fails the batch instead of hanging
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


# Session settings of the batch connections, sent as startup parameters: they are the session's
# defaults, so nothing (not even a RESET ALL) takes them away.
# - synchronous_commit off: a batch's writes, counters and ledger mark are still atomic and WAL
#   order is kept; finalization commits synchronously, which flushes every earlier commit.
# - enable_seqscan off: every batch query is a key lookup through an index. During a large import
#   the statistics lag the table by orders of magnitude, and a plan made for a "tiny" table would
#   scan it per batch.
SESSION_SETTINGS = {
    "application_name": "importer",
    "synchronous_commit": "off",
    "enable_seqscan": "off",
}


async def connect_pool(dsn: str, size: int) -> asyncpg.Pool:
    """A pool of connections set up for batch transactions (see ``SESSION_SETTINGS``)."""
    with translated_errors():
        pool = await asyncpg.create_pool(
            dsn,
            min_size=1,
            max_size=size,
            reset=_keep_session,
            server_settings=SESSION_SETTINGS,
        )
    assert pool is not None
    return pool


async def _keep_session(conn: Conn) -> None:
    """The pool's reset on release: nothing to undo, and no round trip per batch.

    asyncpg's default reset runs ``RESET ALL`` (and more) on every release. The store's
    connections leave no session state behind them: every statement runs in a transaction
    that ends before the release (settings are ``SET LOCAL``, cursors close at commit), and
    nothing LISTENs or takes session advisory locks. (asyncpg still rolls back an open
    transaction itself before calling this.)
    """


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
        self._id_pool: list[int] = []
        self._inserted_since_analyze = 0
        self._analyze_after = lifecycle.FIRST_ANALYZE_AFTER
        self._analyzing = False

    # --- jobs ---------------------------------------------------------------------------------

    async def create_job(self, new_job: NewJob, status: JobStatus) -> Job:
        layout = orjson.dumps(new_job.layout).decode() if new_job.layout is not None else None
        with translated_errors():
            await self._pool.execute(
                self._q["insert_job"],
                new_job.id,
                new_job.client_id,
                new_job.user_id,
                status.value,
                new_job.source,
                new_job.input_format,
                layout,
                new_job.strategy,
                new_job.chunk_size,
                new_job.partitions,
                new_job.has_internationalization,
                new_job.bytes_total,
                new_job.journey_id,
                new_job.auto_start_journey_mailing,
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
            async with self._pool.acquire(timeout=_ACQUIRE_TIMEOUT_S) as conn, conn.transaction():
                await conn.execute(self._q["synchronous_commit"])
                row = await conn.fetchrow(
                    self._q["finalize_job"],
                    job_id,
                    target.value,
                    fail_reason,
                    _now(),
                    lifecycle.allowed_sources(target),
                )
        if row is None:
            return None
        counters = Counters(
            *(row[k] for k in ("rows_read", "inserted", "updated", "invalid", "error", "ignored"))
        )
        return Finalized(JobStatus(row["status"]), counters)

    async def ensure_custom_fields(self, job: Job, names: Sequence[str]) -> int:
        with translated_errors():
            created = len(
                await self._pool.fetch(
                    self._q["create_custom_fields"], job.client_id, list(names), job.id
                )
            )
            if created:
                await self._pool.execute(self._q["record_created_fields"], job.id, created)
            rows = await self._pool.fetch(self._q["custom_field_ids"], job.client_id, list(names))
        for row in rows:
            self._field_ids[(job.client_id, row["key"])] = row["id"]
        return created

    async def done_batches(self, job_id: uuid.UUID) -> frozenset[tuple[int, int]]:
        with translated_errors():
            rows = await self._pool.fetch(self._q["done_batches"], job_id)
        return frozenset((r["chunk_no"], r["partition"]) for r in rows)

    # --- batches ------------------------------------------------------------------------------

    async def apply_batch(self, job: Job, batch: Batch) -> Counters | None:
        """One transaction: the rows' writes, the issues, then the ledger row with the counters.

        The ledger row goes last: if the batch was already applied (a duplicate or a race with
        another worker), its primary key refuses the row and everything rolls back.
        """
        try:
            with translated_errors():
                async with (
                    self._pool.acquire(timeout=_ACQUIRE_TIMEOUT_S) as conn,
                    conn.transaction(),
                ):
                    new_keys = await self._write_rows(conn, job, batch.rows) if batch.rows else 0
                    await self._write_issues(conn, job.id, batch.issues)
                    counters = lifecycle.batch_counters(batch, job.strategy, new_keys)
                    await self._record(conn, job, batch, "done", counters, 1, None)
        except BatchAlreadyAppliedError:
            return None
        await self._keep_statistics(counters.inserted)
        return counters

    async def _keep_statistics(self, inserted: int) -> None:
        """ANALYZE each time this store's inserts double: plans stay right as tables grow."""
        self._inserted_since_analyze += inserted
        if self._analyzing or self._inserted_since_analyze < self._analyze_after:
            return
        self._analyzing = True
        try:
            with translated_errors():
                await self._pool.execute(self._q["analyze_contacts"])
        finally:
            self._analyzing = False
        self._inserted_since_analyze = 0
        self._analyze_after = lifecycle.next_analyze_threshold(self._analyze_after)

    async def discard_batch(self, job: Job, batch: Batch, attempts: int, error: str) -> None:
        lost = tuple(
            RowIssue(r.line, None, Reason.CHUNK_DISCARDED, error[:1024], Severity.ERROR)
            for r in batch.rows
        )
        with contextlib.suppress(BatchAlreadyAppliedError), translated_errors():
            async with self._pool.acquire(timeout=_ACQUIRE_TIMEOUT_S) as conn, conn.transaction():
                await self._write_issues(conn, job.id, batch.issues + lost)
                counters = lifecycle.discarded_counters(batch)
                await self._record(conn, job, batch, "discarded", counters, attempts, error)

    async def _record(
        self,
        conn: Conn,
        job: Job,
        batch: Batch,
        status: str,
        counters: Counters,
        attempts: int,
        error: str | None,
    ) -> None:
        recorded = await conn.fetchval(
            self._q["record_batch"],
            job.id,
            batch.chunk_no,
            batch.partition,
            status,
            batch.first_line,
            batch.end_offset,
            counters.rows_read,
            counters.inserted,
            counters.updated,
            counters.invalid,
            counters.error,
            counters.ignored,
            attempts,
            error,
        )
        if recorded is None:
            raise BatchAlreadyAppliedError()

    async def _write_rows(self, conn: Conn, job: Job, rows: Sequence[ContactRow]) -> int:
        """Decide the batch's writes from the stored state, then make only those."""
        folded = merge.fold_rows(rows, job.strategy)
        stored = await self._stored_contacts(conn, job, sorted(folded))
        plan = merge.plan_batch(folded, job.strategy, stored)
        await self._write_plan(conn, job, plan)
        return plan.new_keys

    def _client_field_ids(self, client: int) -> dict[str, int]:
        """The client's known custom fields: lower-case name → id."""
        return {lower: i for (c, lower), i in self._field_ids.items() if c == client}

    async def _stored_contacts(
        self, conn: Conn, job: Job, keys: list[str]
    ) -> dict[str, merge.StoredContact]:
        names = {i: lower for lower, i in self._client_field_ids(job.client_id).items()}
        client = job.client_id
        stored = {}
        for r in await conn.fetch(self._q["find_contacts"], client, keys, list(names)):
            channels, values = r["channels"], r["detail_values"]
            field_ids, field_values = r["field_ids"], r["field_values"]
            stored[r["cpf_cnpj"]] = merge.StoredContact(
                r["id"],
                r["name"],
                r["street_address"],
                frozenset(zip(channels, values, strict=True)) if channels else frozenset(),
                {names[i]: v for i, v in zip(field_ids, field_values, strict=True)}
                if field_ids
                else {},
            )
        return stored

    async def _write_plan(self, conn: Conn, job: Job, plan: merge.BatchPlan) -> None:
        """COPY the new contacts, channels and custom values; then update what MERGE changes in
        stored contacts."""
        client, job_id = job.client_id, job.id
        field_ids = self._client_field_ids(client)
        contact_rows: list[tuple[Any, ...]] = []
        detail_rows: list[tuple[Any, ...]] = [
            (cid, client, d.channel, d.value, d.country_code, d.country)
            for cid, d in plan.detail_inserts
        ]
        custom_rows: list[tuple[Any, ...]] = [
            (cid, client, field_ids[name.lower()], value)
            for cid, name, value in plan.custom_inserts
        ]
        ids = await self._contact_ids(conn, len(plan.new_contacts))
        for contact_id, c in zip(ids, plan.new_contacts, strict=True):
            contact_rows.append((contact_id, client, c.key, c.name, c.street_address, job_id))
            detail_rows += [
                (contact_id, client, d.channel, d.value, d.country_code, d.country)
                for d in c.details.values()
            ]
            custom_rows += [
                (contact_id, client, field_ids[lower], value)
                for lower, (_, value) in c.custom_fields.items()
            ]
        for table, rows, columns in (
            ("contact", contact_rows, _CONTACT),
            ("contact_details", detail_rows, _DETAIL),
            ("contact_custom_fields", custom_rows, _CUSTOM),
        ):
            if rows:
                await conn.copy_records_to_table(table, records=rows, columns=columns)
        await self._update_stored(conn, client, plan)

    async def _update_stored(self, conn: Conn, client: int, plan: merge.BatchPlan) -> None:
        if plan.contact_updates:
            ids, names, addresses = zip(*plan.contact_updates, strict=True)
            await conn.execute(self._q["update_contacts"], ids, names, addresses)
        if plan.custom_updates:
            field_ids = self._client_field_ids(client)
            values = sorted(  # one lock order for every writer
                (cid, field_ids[name.lower()], value) for cid, name, value in plan.custom_updates
            )
            await conn.execute(
                self._q["update_custom_values"], *map(list, zip(*values, strict=True))
            )

    async def _contact_ids(self, conn: Conn, count: int) -> list[int]:
        """Ids for new contacts, reserved from the sequence in blocks (gaps are harmless)."""
        while len(self._id_pool) < count:
            block = max(count - len(self._id_pool), _ID_BLOCK)
            self._id_pool.extend(r[0] for r in await conn.fetch(self._q["next_contact_ids"], block))
        ids = self._id_pool[:count]
        del self._id_pool[:count]
        return ids

    async def _write_issues(
        self, conn: Conn, job_id: uuid.UUID, issues: Sequence[RowIssue]
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
            async with self._pool.acquire(timeout=_ACQUIRE_TIMEOUT_S) as conn, conn.transaction():
                async for r in conn.cursor(self._q["row_errors"], job_id, prefetch=2000):
                    yield RowIssue(
                        r["line"],
                        r["column_name"],
                        Reason(r["reason"]),
                        r["value"],
                        Severity(r["severity"]),
                    )


def _text(value: str | None) -> str | None:
    """Text safe for a PostgreSQL text column (no NUL; undecodable surrogates escaped)."""
    if value is None:
        return None
    cleaned = value.replace("\x00", "\\x00")
    return cleaned.encode("utf-8", "backslashreplace").decode("utf-8")


def job_from_row(row: asyncpg.Record) -> Job:
    counters = Counters(
        *(row[k] for k in ("rows_read", "inserted", "updated", "invalid", "error", "ignored"))
    )
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
