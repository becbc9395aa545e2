"""PostgreSQL adapter (asyncpg): the only module that talks to the database driver.

Driver errors are translated once, here: connection losses, deadlocks, serialization failures
and lock or statement time-outs become :class:`TransientStoreError`, a refused value or
constraint :class:`ContentRefusedError`, anything else :class:`StoreError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import asyncpg
import orjson
from asyncpg.pool import PoolConnectionProxy

from importer.core import failpoints, lifecycle, merge
from importer.core.errors import (
    BatchAlreadyAppliedError,
    ContentRefusedError,
    DatabaseUnreachableError,
    IllegalTransitionError,
    JobNotFoundError,
    LaneNotReadyError,
    LaneSplitError,
    LeaseLostError,
    StoreError,
    TransientStoreError,
)
from importer.core.models import (
    TERMINAL_STATUSES,
    Batch,
    Channel,
    Checkpoint,
    ConflictStrategy,
    ContactRow,
    Counters,
    Finalized,
    InputFormat,
    Job,
    JobStatus,
    JobView,
    JobWarning,
    LeaseState,
    NewJob,
    Reason,
    RemovedData,
    Requeued,
    RowIssue,
    Severity,
)
from importer.settings import DEFAULT_LOCK_TIMEOUT_MS
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
    # A connection killed under a pooled connection may surface as a protocol state error.
    asyncpg.exceptions.InternalClientError,
    # A concurrent import of the same client inserted one of our new keys first: the retry
    # finds it stored and merges into it.
    asyncpg.exceptions.UniqueViolationError,
    ConnectionError,
    OSError,
    TimeoutError,
)

_TURN_POLL_S = 0.2  # how often an import waiting for its client's turn looks again
_ID_BLOCK = 4096  # contact ids reserved per sequence round trip
_ACQUIRE_TIMEOUT_S = 60.0  # a pool that cannot reconnect fails the batch instead of hanging
_MIGRATION_LOCK = 0x1A4F0001  # advisory lock id serializing concurrent `db migrate` runs
_CLAIM_LOCK = 0x1A4F0002  # advisory lock id serializing job claims (exact fair-share counts)
JOBS_CHANNEL = "importer_jobs"  # start_job notifies it (payload: the job id); workers LISTEN
# The keyset of a first history page: after every (created_at, id).
_NO_CURSOR = (dt.datetime.max.replace(tzinfo=dt.UTC), uuid.UUID(int=(1 << 128) - 1))
_COUNTERS = ("rows_read", "inserted", "updated", "invalid", "error", "ignored")
_RUNNING = lifecycle.values(lifecycle.RUNNING_STATUSES)
_CLAIMABLE = lifecycle.values(lifecycle.CLAIMABLE_STATUSES)

_CONTACT = ("id", "client_id", "cpf_cnpj", "name", "street_address", "import_job_id")
_DETAIL = ("contact_id", "client_id", "channel_id", "value", "country_code", "country")
_CUSTOM = ("contact_id", "client_id", "custom_field_id", "value")
_ROW_ERROR = ("job_id", "line", "column_name", "reason", "severity", "value")


# A connection after one of these is in doubt: it is closed, never handed back to the pool.
_BROKEN = (
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    asyncpg.exceptions.PostgresConnectionError,
    ConnectionError,
    OSError,
    TimeoutError,
)


@contextlib.asynccontextmanager
async def pooled(pool: asyncpg.Pool) -> AsyncIterator[Conn]:
    """A connection of ``pool`` for one unit of work. If the work dies of a broken connection
    (the server killed it, the network dropped), the connection is terminated instead of going
    back to the pool, where the next batch would meet it half-dead."""
    async with pool.acquire(timeout=_ACQUIRE_TIMEOUT_S) as conn:
        try:
            yield conn
        except _BROKEN:
            # (A connection the server closed is already back in the pool, closed: nothing
            # to terminate then.)
            with contextlib.suppress(asyncpg.exceptions.InterfaceError):
                conn.terminate()
            raise


# The database refused the rows themselves (SQLSTATE classes 22, 23 and 54: a bad value, a
# constraint, an index row too large): the pipeline splits the batch down to the refused row.
_CONTENT = (
    asyncpg.exceptions.DataError,
    asyncpg.exceptions.IntegrityConstraintViolationError,
    asyncpg.exceptions.ProgramLimitExceededError,
)


@contextlib.contextmanager
def translated_errors() -> Iterator[None]:
    """Translate driver errors into the importer's own, once, at the boundary (transient
    first: a unique violation is a concurrent import's insert, not the content's fault)."""
    try:
        yield
    except _TRANSIENT as exc:
        raise TransientStoreError(f"{type(exc).__name__}: {exc}") from exc
    except _CONTENT as exc:
        raise ContentRefusedError(f"{type(exc).__name__}: {exc}") from exc
    except asyncpg.exceptions.UndefinedTableError as exc:  # first contact with a new database
        raise StoreError(
            f"{type(exc).__name__}: {exc}: the database has no importer schema yet; "
            "run `importer db migrate` (on this DATABASE_URL)"
        ) from exc
    except asyncpg.exceptions.InvalidCatalogNameError as exc:
        raise StoreError(
            f"{type(exc).__name__}: {exc}: create it (`createdb`) and run `importer db migrate`, "
            "or point DATABASE_URL at another"
        ) from exc
    except asyncpg.PostgresError as exc:
        raise StoreError(f"{type(exc).__name__}: {exc}") from exc


@contextlib.contextmanager
def unreachable(dsn: str) -> Iterator[None]:
    """A connection that cannot be made (refused, no such host, timed out) as the server not
    answering at ``dsn``: the command line says what was tried and what to do."""
    try:
        yield
    except OSError as exc:  # ConnectionRefusedError, socket.gaierror, TimeoutError
        raise DatabaseUnreachableError(dsn, f"{type(exc).__name__}: {exc}") from exc


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


async def connect_pool(
    dsn: str, size: int, *, lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
) -> asyncpg.Pool:
    """A pool of connections set up for batch transactions (see ``SESSION_SETTINGS``).

    ``lock_timeout_ms``: how long a statement waits for a lock before it fails (transient: the
    batch is retried, then discarded) — a lock held elsewhere never stalls an import forever.
    """
    with translated_errors(), unreachable(dsn):
        pool = await asyncpg.create_pool(
            dsn,
            min_size=1,
            max_size=size,
            reset=_keep_session,
            server_settings={**SESSION_SETTINGS, "lock_timeout": f"{lock_timeout_ms}ms"},
        )
    assert pool is not None
    return pool


async def _keep_session(conn: Conn) -> None:
    """The pool's reset on release: nothing to undo, and no round trip per batch.

    asyncpg's default reset runs ``RESET ALL`` (and more) on every release. The store's
    connections leave no session state behind them: every statement runs in a transaction
    that ends before the release (settings are ``SET LOCAL``, cursors close at commit), and
    nothing takes session advisory locks or LISTENs past its use (``wait_for_jobs`` on a pool
    connection UNLISTENs before the release). (asyncpg still rolls back an open transaction
    itself before calling this.)
    """


async def migrate(dsn: str) -> None:
    """Apply ``schema.sql`` (idempotent), serialized by an advisory lock."""
    with translated_errors():
        with unreachable(dsn):
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


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    """Wait for ``event`` up to ``timeout_s``, then clear it."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)
    event.clear()


class Listener:
    """A connection of its own that LISTENs on one channel, opened on the first wait and kept.

    :meth:`wait` returns when a notification came since the last call (or meanwhile), or after
    the timeout. If the connection drops, the waiter wakes (a notification may have been lost)
    and the next wait reconnects.
    """

    def __init__(
        self, dsn: str, channel: str, *, server_settings: dict[str, str] | None = None
    ) -> None:
        self._dsn = dsn
        self._channel = channel
        self._server_settings = server_settings
        self._conn: asyncpg.Connection | None = None
        self._notified = asyncio.Event()

    async def wait(self, timeout_s: float) -> None:
        await self._connect()
        await _wait(self._notified, timeout_s)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with translated_errors():
                await conn.close()

    async def _connect(self) -> None:
        if self._conn is not None and not self._conn.is_closed():
            return
        with translated_errors():
            conn = await asyncpg.connect(self._dsn, server_settings=self._server_settings)
            try:
                await conn.add_listener(self._channel, self._on_notified)
            except BaseException:
                await conn.close()
                raise
        conn.add_termination_listener(self._on_lost)
        self._conn = conn

    def _on_notified(self, *_notification: object) -> None:
        self._notified.set()

    def _on_lost(self, conn: object) -> None:
        if conn is self._conn:
            self._conn = None
        self._notified.set()


class PostgresStore:
    """The :class:`importer.ports.Store` on PostgreSQL: the pipeline's batches, the workers'
    queue (:class:`importer.ports.JobQueue`) and the API's jobs."""

    def __init__(self, pool: asyncpg.Pool, *, dsn: str | None = None) -> None:
        """``dsn``: where :meth:`wait_for_jobs` opens its own LISTEN connection (workers only)."""
        self._pool = pool
        self._listener = Listener(dsn, JOBS_CHANNEL) if dsn is not None else None
        self._q = queries()
        self._field_ids: dict[tuple[int, str], int] = {}  # (client, lower(name)) → id
        self._id_pool: list[int] = []
        self._inserted_since_analyze = 0
        self._analyze_after = lifecycle.FIRST_ANALYZE_AFTER
        self._analyzing = False

    # --- jobs ---------------------------------------------------------------------------------

    async def create_job(self, new_job: NewJob, status: JobStatus) -> Job:
        with translated_errors():
            await self.insert_job(self._pool, new_job, status)
        return await self.get_job(new_job.id)

    async def insert_job(
        self, conn: Conn | asyncpg.Pool, new_job: NewJob, status: JobStatus
    ) -> None:
        """The job's row, through ``conn`` (a transaction that also inserts its links)."""
        await conn.execute(self._q["insert_job"], *_job_values(new_job, status))

    async def get_job(self, job_id: uuid.UUID) -> Job:
        with translated_errors():
            row = await self._pool.fetchrow(self._q["get_job"], job_id)
        if row is None:
            raise JobNotFoundError(f"import {job_id} does not exist")
        return job_from_row(row)

    async def transition(
        self, job_id: uuid.UUID, target: JobStatus, *, owner: str | None = None
    ) -> None:
        with translated_errors():
            moved = await self._pool.fetchval(
                self._q["transition_job"],
                job_id,
                target.value,
                lifecycle.allowed_sources(target),
                owner,
            )
        if moved is None:
            job = await self._leased_job(job_id, owner)
            raise IllegalTransitionError(f"import {job_id}: {job.status.value} → {target.value}")

    async def finalize(
        self,
        job_id: uuid.UUID,
        fail_reason: str | None,
        *,
        cancelled: bool = False,
        owner: str | None = None,
    ) -> Finalized | None:
        target = lifecycle.final_status(fail_reason, cancelled)
        sources = lifecycle.allowed_sources(target)
        if failpoints.armed is not None:
            await failpoints.armed.reach(failpoints.BEFORE_FINALIZE)
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                row = await self._finalize_on(conn, job_id, target, fail_reason, sources, owner)
        if failpoints.armed is not None:
            await failpoints.armed.reach(failpoints.AFTER_FINALIZE_BEFORE_RETURN)
        if row is None:
            await self._leased_job(job_id, owner)
            return None
        return Finalized(JobStatus(row["status"]), _counters(row))

    async def _finalize_on(
        self,
        conn: Conn,
        job_id: uuid.UUID,
        target: JobStatus,
        fail_reason: str | None,
        sources: list[str],
        owner: str | None,
    ) -> asyncpg.Record | None:
        """finalize_job in the caller's transaction, committed synchronously, once the batches
        in flight on other instances have committed (``lock_job``)."""
        await conn.execute(self._q["synchronous_commit"])
        await conn.execute(self._q["lock_job"], job_id)
        return await conn.fetchrow(
            self._q["finalize_job"], job_id, target.value, fail_reason, _now(), sources, owner
        )

    async def mark_read_to_end(self, job_id: uuid.UUID, *, owner: str | None = None) -> None:
        with translated_errors():
            await self._pool.execute(self._q["mark_read_to_end"], job_id, owner)

    async def _leased_job(self, job_id: uuid.UUID, owner: str | None) -> Job:
        """The job; LeaseLostError when ``owner`` is given and no longer holds its lease."""
        job = await self.get_job(job_id)
        if owner is not None and job.lease_owner != owner:
            raise LeaseLostError(f"import {job_id} is leased to {job.lease_owner}, not {owner}")
        return job

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

    async def done_batches(self, job_id: uuid.UUID) -> frozenset[tuple[int, int, int]]:
        with translated_errors():
            rows = await self._pool.fetch(self._q["done_batches"], job_id)
        return frozenset((r["chunk_no"], r["partition"], r["part"]) for r in rows)

    async def checkpoint(self, job_id: uuid.UUID, partitions: int) -> Checkpoint | None:
        with translated_errors():
            row = await self._pool.fetchrow(self._q["checkpoint"], job_id, partitions)
        return None if row is None else Checkpoint(*row)

    # --- batches ------------------------------------------------------------------------------

    async def apply_batch(self, job: Job, batch: Batch, *, lane: bool = False) -> Counters | None:
        """One transaction: the rows' writes, the issues, then the ledger row with the counters.

        The ledger row goes last: if the batch was already applied (a duplicate or a race with
        another worker), its primary key refuses the row and everything rolls back. With
        ``lane`` (multi-instance imports), the batch first enters its lane (:meth:`_in_lane`).
        """
        try:
            with translated_errors():
                async with (
                    pooled(self._pool) as conn,
                    conn.transaction(),
                ):
                    if lane and not await self._in_lane(conn, job, batch):
                        return None
                    if failpoints.armed is not None:
                        await failpoints.armed.reach(failpoints.chunk_point(batch.chunk_no))
                    new_keys = await self._write_rows(conn, job, batch.rows) if batch.rows else 0
                    await self._write_issues(conn, job.id, batch.issues)
                    if failpoints.armed is not None:
                        await failpoints.armed.reach(failpoints.AFTER_COPY_BEFORE_COMMIT)
                    counters = lifecycle.batch_counters(batch, job.strategy, new_keys)
                    await self._record(conn, job, batch, "done", counters, 1, None)
        except BatchAlreadyAppliedError:
            return None
        await self._keep_statistics(counters.inserted)
        return counters

    async def _in_lane(self, conn: Conn, job: Job, batch: Batch) -> bool:
        """Whether the batch may apply now, in chunk order within its key partition's lane.

        A whole batch moves the lane past its chunk in its own transaction (the lane row stays
        locked until it commits: the next chunk's batch waits for it). A piece of a split batch
        marks the lane as going in by pieces (:meth:`advance_lane` moves it on after the last).
        False: the lane has passed the chunk (a repeat, a no-op). LaneNotReadyError: an earlier
        chunk of the lane is not in yet. LaneSplitError: a whole batch another delivery split.
        """
        key = (job.id, batch.partition, batch.chunk_no)
        entered = self._q["enter_lane"] if batch.part == 1 else self._q["enter_lane_piece"]
        while await conn.fetchval(entered, *key) is None:
            lane = await conn.fetchrow(self._q["lane_position"], job.id, batch.partition)
            if lane is None:
                raise LaneNotReadyError(f"import {job.id} has no lane {batch.partition}", None)
            position = lane["next_chunk"]
            if position > batch.chunk_no:
                return False
            if position < batch.chunk_no:
                raise LaneNotReadyError(
                    f"import {job.id} lane {batch.partition} is at chunk {position}", position
                )
            if batch.part == 1 and lane["split_chunk"] == position:
                parts = await conn.fetch(
                    self._q["batch_parts"], job.id, batch.chunk_no, batch.partition
                )
                raise LaneSplitError(
                    f"import {job.id} chunk {batch.chunk_no} goes in by pieces",
                    frozenset(r["part"] for r in parts),
                )
            # The lane reached the chunk after the update looked at it: try again.
        return True

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

    async def discard_batch(
        self,
        job: Job,
        batch: Batch,
        attempts: int,
        error: str,
        *,
        reason: Reason = Reason.CHUNK_DISCARDED,
        lane: bool = False,
    ) -> None:
        lost = tuple(
            RowIssue(r.line, None, reason, error[:1024], Severity.ERROR) for r in batch.rows
        )
        with contextlib.suppress(BatchAlreadyAppliedError), translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                if lane and not await self._in_lane(conn, job, batch):
                    return
                await self._write_issues(conn, job.id, batch.issues + lost)
                counters = lifecycle.discarded_counters(batch)
                await self._record(conn, job, batch, "discarded", counters, attempts, error)

    async def given_up_error(self, job_id: uuid.UUID, batch: Batch) -> str | None:
        if not batch.rows:
            return None
        lines = [r.line for r in batch.rows]
        with translated_errors():
            error: str | None = await self._pool.fetchval(
                self._q["given_up_error"], job_id, batch.chunk_no, batch.partition, lines
            )
        return error

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
        """The ledger row; a worker's run (``job.lease_owner``) is fenced in the same statement."""
        values = (
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
            batch.part,
            batch.end_line,
        )
        if job.lease_owner is None:
            recorded = await conn.fetchval(self._q["record_batch"], *values) is not None
        else:
            fence = await conn.fetchrow(
                self._q["record_batch_fenced"], *values, job.lease_owner, _RUNNING
            )
            assert fence is not None
            if not fence["held"]:
                raise LeaseLostError(f"import {job.id}: {job.lease_owner} lost its lease")
            recorded = fence["recorded"]
        if not recorded:
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
        # Let the event loop serve others (HTTP requests in `importer serve`) between building
        # the batch's rows and encoding them: each step is several milliseconds of Python.
        await asyncio.sleep(0)
        for table, rows, columns in (
            ("contact", contact_rows, _CONTACT),
            ("contact_details", detail_rows, _DETAIL),
            ("contact_custom_fields", custom_rows, _CUSTOM),
        ):
            if rows:
                await conn.copy_records_to_table(table, records=rows, columns=columns)
        await self._update_stored(conn, client, plan)
        if job.journey_id is not None:
            await self._join_journey(conn, job, plan, ids)

    async def _join_journey(
        self, conn: Conn, job: Job, plan: merge.BatchPlan, new_ids: Sequence[int]
    ) -> None:
        """Seed 003 §9: every contact whose rows carry a journey channel joins the import's
        journey classification, one ``journey_contact`` per (contact, journey detail). Idempotent
        (a requeued run's batch links nothing twice)."""
        links = list(plan.stored_journeys)
        for contact_id, contact in zip(new_ids, plan.new_contacts, strict=True):
            links += [(contact_id, v) for ch, v in contact.details if ch is Channel.JOURNEY]
        if links:
            contact_ids, values = zip(*sorted(links), strict=True)
            await conn.execute(
                self._q["join_journey"], job.id, job.client_id, list(contact_ids), list(values)
            )

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

    # --- the API's jobs -----------------------------------------------------------------------
    # Every method is scoped by client: another client's job is exactly like a missing one.
    # ``client_id`` None is the owner's command line (`importer status`, `importer history`).

    async def view_job(self, client_id: int | None, job_id: uuid.UUID) -> JobView:
        query, args = (
            ("view_any_job", (job_id,)) if client_id is None else ("view_job", (client_id, job_id))
        )
        with translated_errors():
            row = await self._pool.fetchrow(self._q[query], *args)
        if row is None:
            raise JobNotFoundError(f"import {job_id} does not exist")
        return view_from_row(row)

    async def list_jobs(
        self,
        client_id: int | None,
        *,
        user_id: str | None,
        statuses: Sequence[JobStatus] | None,
        before: tuple[dt.datetime, uuid.UUID] | None,
        limit: int,
    ) -> list[JobView]:
        """Newest first by (created_at, id); ``before`` is the previous page's last item."""
        created_at, last_id = before or _NO_CURSOR
        wanted = lifecycle.values(statuses) if statuses is not None else None
        args: tuple[object, ...]
        if client_id is None:
            query, args = "list_any_jobs", (created_at, last_id, wanted, limit, user_id)
        else:
            args = (client_id, created_at, last_id, wanted, limit)
            query = "list_jobs" if user_id is None else "list_user_jobs"
            if user_id is not None:
                args += (user_id,)
        with translated_errors():
            rows = await self._pool.fetch(self._q[query], *args)
        return [view_from_row(row) for row in rows]

    async def mark_uploaded(
        self,
        client_id: int,
        job_id: uuid.UUID,
        *,
        ok: bool,
        fail_reason: str | None,
        storage_version: str | None = None,
    ) -> JobView:
        """uploading → uploaded (recording the verified object version), or → failed with the
        reason through finalization. A repeat changes nothing; a job past its upload is refused.
        """
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                current = await self._locked(conn, client_id, job_id)
                target = lifecycle.upload_target(JobStatus(current["status"]), ok)
                if target is JobStatus.UPLOADED:
                    await conn.execute(
                        self._q["transition_client_job"],
                        job_id,
                        client_id,
                        target.value,
                        lifecycle.allowed_sources(target),
                        storage_version,
                    )
                elif target is JobStatus.FAILED:
                    sources = [JobStatus.UPLOADING.value]
                    await self._finalize_on(conn, job_id, target, fail_reason, sources, None)
        return await self.view_job(client_id, job_id)

    async def start_job(
        self, client_id: int, job_id: uuid.UUID, operation_id: str | None
    ) -> JobView:
        """uploaded → queued (waking the workers), queued → queued recording the operation id."""
        target = JobStatus.QUEUED
        with translated_errors():
            row = await self._pool.fetchrow(
                self._q["start_job"],
                job_id,
                client_id,
                operation_id,
                lifecycle.allowed_sources(target),
                target.value,
            )
        if row is None:
            raise JobNotFoundError(f"import {job_id} does not exist")
        if row["previous"] is None:
            current = JobStatus(row["current"])
            raise lifecycle.start_refusal(current) or IllegalTransitionError(current.value)
        return await self.view_job(client_id, job_id)

    async def request_cancel(self, client_id: int, job_id: uuid.UUID) -> JobView:
        """Cancel at once a job no worker ever claimed; flag a claimed one (its worker stops
        between chunks and finalizes it ``cancelled``); a terminal job stays as it is."""
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                current = await self._locked(conn, client_id, job_id)
                claimed = current["lease_expires_at"] is not None or current["in_process"]
                action = lifecycle.cancel_action(JobStatus(current["status"]), claimed=claimed)
                if action is lifecycle.CancelAction.NOW:
                    target = JobStatus.CANCELLED
                    sources = lifecycle.allowed_sources(target)
                    await self._finalize_on(conn, job_id, target, None, sources, None)
                elif action is lifecycle.CancelAction.REQUEST:
                    await conn.execute(self._q["request_cancel"], job_id)
        return await self.view_job(client_id, job_id)

    async def _locked(self, conn: Conn, client_id: int, job_id: uuid.UUID) -> asyncpg.Record:
        row = await conn.fetchrow(self._q["lock_client_job"], job_id, client_id)
        if row is None:
            raise JobNotFoundError(f"import {job_id} does not exist")
        return row

    # --- the owner's operations (seed 001's runbook) -------------------------------------------
    # ``client_id`` None: the command line, whose operator acts on any client's job.

    async def requeue_job(
        self, client_id: int | None, job_id: uuid.UUID, operation_id: str
    ) -> Requeued:
        """An ended job back to ``queued`` as its next run (see the requeue_job query)."""
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                current = await self._admin_locked(conn, client_id, job_id)
                data_removed = current["data_removed"]
                _refuse_requeue(current)
                row = await conn.fetchrow(
                    self._q["requeue_job"],
                    job_id,
                    client_id,
                    lifecycle.requeue_sources(data_removed),
                    operation_id,
                    lifecycle.ended_values(),
                )
        assert row is not None  # the locked row was in an allowed status
        return Requeued(
            job_id, current["client_id"], row["run_generation"], row["finalizations_removed"]
        )

    async def remove_job_data(self, client_id: int | None, job_id: uuid.UUID) -> RemovedData:
        """Soft-delete the contacts an ended import created, and clear its ledger, lanes and
        per-row report, in one transaction; a repeat removes nothing more."""
        removed_at = _now()
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                current = await self._admin_locked(conn, client_id, job_id)
                refusal = lifecycle.removal_refusal(JobStatus(current["status"]))
                if refusal is not None:
                    raise refusal
                owner = current["client_id"]
                contacts = await conn.fetchrow(
                    self._q["remove_job_contacts"], job_id, owner, removed_at
                )
                ledger = await conn.fetchrow(self._q["clear_job_ledger"], job_id)
                marked = await conn.fetchrow(self._q["mark_data_removed"], job_id, removed_at)
        assert contacts is not None
        assert ledger is not None
        assert marked is not None
        return RemovedData(
            job_id,
            owner,
            contacts=contacts["contacts"],
            details=contacts["details"],
            chunks=ledger["chunks"],
            row_errors=ledger["row_errors"],
            removed_at=marked["data_removed_at"],
        )

    async def job_statuses(
        self, client_id: int | None, job_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, tuple[int, JobStatus]]:
        """job id → (client, status) of the given jobs that exist (for ``client_id``)."""
        with translated_errors():
            rows = await self._pool.fetch(self._q["job_statuses"], list(job_ids), client_id)
        return {r["id"]: (r["client_id"], JobStatus(r["status"])) for r in rows}

    async def _admin_locked(
        self, conn: Conn, client_id: int | None, job_id: uuid.UUID
    ) -> asyncpg.Record:
        row = await conn.fetchrow(self._q["lock_admin_job"], job_id, client_id)
        if row is None:
            raise JobNotFoundError(f"import {job_id} does not exist")
        return row

    # --- the workers' queue -------------------------------------------------------------------

    async def claim_job(self, owner: str, lease_s: float, max_per_client: int) -> Job | None:
        """Lease the oldest claimable job to ``owner`` (see the claim_job query)."""
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                await conn.execute(self._q["claim_lock"], _CLAIM_LOCK)
                row = await conn.fetchrow(
                    self._q["claim_job"], owner, float(lease_s), max_per_client, _CLAIMABLE
                )
        return None if row is None else job_from_row(row)

    async def renew_lease(self, job_id: uuid.UUID, owner: str, lease_s: float) -> LeaseState:
        with translated_errors():
            row = await self._pool.fetchrow(self._q["renew_lease"], job_id, owner, float(lease_s))
        if row is None:
            return LeaseState(held=False, cancel_requested=False)
        return LeaseState(held=True, cancel_requested=row["cancel_requested"])

    async def release_lease(self, job_id: uuid.UUID, owner: str) -> None:
        with translated_errors():
            await self._pool.execute(self._q["release_lease"], job_id, owner)

    async def take_over_job(
        self, job_id: uuid.UUID, owner: str, lease_s: float, operation_id: str
    ) -> Job:
        """Lease an ended or abandoned job to ``owner`` for its next run in that process (see
        the take_over_job query), deciding on the locked row."""
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                _refuse_requeue(await self._admin_locked(conn, None, job_id))
                row = await conn.fetchrow(
                    self._q["take_over_job"],
                    job_id,
                    lifecycle.ended_values(),
                    owner,
                    float(lease_s),
                    operation_id,
                )
        assert row is not None  # the locked row exists
        return job_from_row(row)

    async def wait_for_jobs(self, timeout_s: float) -> None:
        """Return when a job was queued since the last call (or meanwhile), or after the timeout.

        With the store's ``dsn``, the LISTEN connection is the store's own, opened on the first
        call and kept until :meth:`close`; if it drops, the waiter wakes (a notification may
        have been lost) and the next call reconnects. Without it, each call LISTENs on a pool
        connection for its own duration (a job queued between two calls waits for the next
        poll).
        """
        if self._listener is None:
            await self._wait_on_pool(timeout_s)
        else:
            await self._listener.wait(timeout_s)

    async def _wait_on_pool(self, timeout_s: float) -> None:
        queued = asyncio.Event()

        def on_queued(*_notification: object) -> None:
            queued.set()

        with translated_errors():
            async with pooled(self._pool) as conn:
                await conn.add_listener(JOBS_CHANNEL, on_queued)
                try:
                    await _wait(queued, timeout_s)
                finally:  # the pool's reset does not UNLISTEN (see _keep_session)
                    await conn.remove_listener(JOBS_CHANNEL, on_queued)

    async def close(self) -> None:
        """Close the LISTEN connection, if any (the pool belongs to the caller)."""
        if self._listener is not None:
            await self._listener.close()

    # --- reports ------------------------------------------------------------------------------

    async def add_warning(self, job_id: uuid.UUID, warning: JobWarning) -> None:
        with translated_errors():
            await self._pool.execute(
                self._q["add_job_warning"], job_id, warning.code.value, _text(warning.message)
            )

    async def row_issues(self, job_id: uuid.UUID) -> AsyncIterator[RowIssue]:
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                stored = await conn.fetchval(self._q["job_warnings"], job_id)
                for warning in _warnings(stored):
                    yield warning.as_issue()
                async for r in conn.cursor(self._q["row_errors"], job_id, prefetch=2000):
                    yield RowIssue(
                        r["line"],
                        r["column_name"],
                        Reason(r["reason"]),
                        r["value"],
                        Severity(r["severity"]),
                    )


def _refuse_requeue(current: asyncpg.Record) -> None:
    """Raise why a job (its lock_admin_job row) can neither be requeued nor resumed, if so."""
    refusal = lifecycle.requeue_refusal(
        JobStatus(current["status"]),
        data_removed=current["data_removed"],
        lease_live=current["lease_live"],
        in_process=current["in_process"],
    )
    if refusal is not None:
        raise refusal


def _text(value: str | None) -> str | None:
    """Text safe for a PostgreSQL text column (no NUL; undecodable surrogates escaped)."""
    if value is None:
        return None
    cleaned = value.replace("\x00", "\\x00")
    return cleaned.encode("utf-8", "backslashreplace").decode("utf-8")


def _counters(row: asyncpg.Record, prefix: str = "") -> Counters:
    return Counters(*(row[prefix + name] or 0 for name in _COUNTERS))


def _json(value: str | None) -> Any:
    return None if value is None else orjson.loads(value)


def _warnings(value: str | None) -> tuple[JobWarning, ...]:
    """import_job.warnings as JobWarnings (unknown codes skipped: a newer version's)."""
    known = {reason.value for reason in Reason}
    return tuple(
        JobWarning(Reason(w["code"]), str(w["message"]))
        for w in _json(value) or ()
        if isinstance(w, dict) and w.get("code") in known
    )


def _job_values(new_job: NewJob, status: JobStatus) -> tuple[object, ...]:
    """insert_job's parameters, in order."""
    tags = list(new_job.tags) if new_job.tags is not None else None
    return (
        new_job.id,
        new_job.client_id,
        new_job.user_id,
        status.value,
        new_job.source,
        new_job.input_format,
        orjson.dumps(new_job.layout).decode() if new_job.layout is not None else None,
        new_job.strategy,
        new_job.chunk_size,
        new_job.partitions,
        new_job.has_internationalization,
        new_job.bytes_total,
        new_job.journey_id,
        new_job.auto_start_journey_mailing,
        new_job.source_size,
        new_job.source_sha256,
        new_job.filename,
        new_job.has_sensitive_data,
        new_job.has_underage_data,
        new_job.data_processing_purpose,
        new_job.lgpd_processing_hypothesis,
        orjson.dumps(tags).decode() if tags is not None else None,
        new_job.kind,
        new_job.in_process,
        new_job.lease_owner,
        float(new_job.lease_s),
        new_job.local_path,
    )


def view_from_row(row: asyncpg.Record) -> JobView:
    """A view_job / list_jobs row: ledger counters while running, the row's once terminal."""
    status = JobStatus(row["status"])
    counters = _counters(row) if status in TERMINAL_STATUSES else _counters(row, "live_")
    tags = _json(row["tags"])
    return JobView(
        id=row["id"],
        client_id=row["client_id"],
        user_id=row["user_id"],
        status=status,
        conflict_strategy=ConflictStrategy(row["conflict_strategy"]),
        input_format=InputFormat(row["input_format"]),
        source=row["source"],
        filename=row["filename"],
        source_size=row["source_size"],
        source_sha256=row["source_sha256"],
        counters=counters,
        rows_done=counters.rows_read,
        bytes_read=row["bytes_read"],
        bytes_total=row["bytes_total"],
        fail_reason=row["fail_reason"],
        cancel_requested=row["cancel_requested_at"] is not None,
        journey_id=row["journey_id"],
        tags=tuple(tags) if tags is not None else None,
        last_operation_id=row["last_operation_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        warnings=_warnings(row["warnings"]),
        batches_done=row["batches_done"],
        read_to_end=row["read_to_end_at"] is not None,
        recent_rows=row["recent_rows"] or 0,
        recent_bytes=row["recent_bytes"] or 0,
        queue_position=row["queue_position"],
    )


def job_from_row(row: asyncpg.Record) -> Job:
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
        counters=_counters(row),
        source_size=row["source_size"],
        source_sha256=row["source_sha256"],
        filename=row["filename"],
        layout=_json(row["layout"]),
        has_internationalization=row["has_internationalization"],
        lease_owner=row["lease_owner"],
        cancel_requested=row["cancel_requested_at"] is not None,
        journey_id=row["journey_id"],
        warnings=_warnings(row["warnings"]),
        local_path=row["local_path"],
    )
