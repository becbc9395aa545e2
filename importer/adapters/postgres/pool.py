"""PostgreSQL (asyncpg) connections: the pool, the schema migration, LISTEN, and the one
translation of driver errors every adapter of this package uses.

Driver errors are translated once, here: connection losses, deadlocks, serialization failures
and lock or statement time-outs become :class:`TransientStoreError`, a refused value or
constraint :class:`ContentRefusedError`, anything else :class:`StoreError`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from importer.core.config import DEFAULT_LOCK_TIMEOUT_MS
from importer.core.errors import (
    ContentRefusedError,
    DatabaseUnreachableError,
    MigrationBlockedError,
    StoreError,
    TransientStoreError,
)
from importer.sql import queries, schema

# A pool's connection proxy or a plain connection.
Conn = asyncpg.Connection | PoolConnectionProxy
# The pool, as the edges name it (they do not import the driver).
Pool = asyncpg.Pool


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

_ACQUIRE_TIMEOUT_S = 60.0  # a pool that cannot reconnect fails the batch instead of hanging
_MIGRATION_LOCK = 0x1A4F0001  # advisory lock id serializing concurrent `db migrate` runs

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
    """Apply ``schema.sql`` (idempotent) in one transaction, then build the indexes that must be
    built concurrently (``queries/migrations.sql``), serialized by an advisory lock."""
    with translated_errors():
        with unreachable(dsn):
            conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("SET client_min_messages = warning")
            await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK)
            async with conn.transaction():
                await conn.execute(schema())
            await _key_form_index(conn)
        finally:
            await conn.close()


_DUPLICATES_SHOWN = 3


async def _key_form_index(conn: Conn) -> None:
    """Build ``contact_client_key_form_key`` (concurrently: other writers go on), after dropping
    an invalid one an interrupted build left; legacy duplicates stop the migration, named."""
    sql = queries()
    valid = await conn.fetchval(sql["index_state"], "contact_client_key_form_key")
    if valid is True:
        return
    if valid is False:
        await conn.execute(sql["drop_contact_key_form_index"])
    try:
        await conn.execute(sql["create_contact_key_form_index"])
    except asyncpg.exceptions.UniqueViolationError:
        await conn.execute(sql["drop_contact_key_form_index"])
        found = await conn.fetch(sql["check_key_duplicates"], None, _DUPLICATES_SHOWN)
        raise MigrationBlockedError(_duplicates_message(found)) from None


def _duplicates_message(found: list[asyncpg.Record]) -> str:
    shown = "; ".join(
        f"client {r['client_id']}: contacts {list(r['contact_ids'])} with keys "
        f"{list(r['stored_keys'])}"
        for r in found
    )
    return (
        "the table contact holds live contacts of one client whose CPF/CNPJ are the same once "
        f"normalized ({shown}), so the importer cannot tell which one a row means: list them all "
        "with `importer db check`, merge or soft-delete the duplicates (see docs/OPERATIONS.md, "
        "legacy duplicates), then run `importer db migrate` again; nothing else was changed"
    )


async def wait_cleared(event: asyncio.Event, timeout_s: float) -> None:
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
        await wait_cleared(self._notified, timeout_s)

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


async def server_version(dsn: str) -> str:
    """The server's version (``SHOW server_version``), for ``importer db status``."""
    with translated_errors():
        with unreachable(dsn):
            conn = await asyncpg.connect(dsn, timeout=10)
        try:
            return str(await conn.fetchval("SHOW server_version"))
        finally:
            await conn.close()
