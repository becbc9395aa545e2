"""Helpers of the jobs, workers and `importer worker` tests: stores, uploaded jobs, polls."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import asyncpg

from importer.adapters.postgres.admin import PostgresAdmin
from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.postgres.views import PostgresJobViews
from importer.adapters.storage.local import LocalObjectStore
from importer.core.models import Counters, JobStatus, NewJob
from importer.services.runs import format_for
from tests.support import bad_cpf, cpf, fetch, write_csv

T = TypeVar("T")

HEADER = ["nome", "cpf", "email", "celular", "plano"]
WAIT_S = 30.0  # every wait for the database is bounded by this


@dataclass
class Env:
    dsn: str
    pool: asyncpg.Pool
    store: PostgresJobQueue
    objects: LocalObjectStore
    views: PostgresJobViews
    admin: PostgresAdmin


def contacts_csv(path: Path, rows: int, *, first: int = 0) -> Path:
    """``rows`` records: repeated keys, an invalid key every 13th row, a bad email every 17th."""
    records = []
    for i in range(first, first + rows):
        key = bad_cpf(i) if i % 13 == 5 else cpf(10_000 + i % max(rows * 4 // 5, 1))
        email = "nope" if i % 17 == 3 else f"c{i}@example.com.br"
        records.append([f"Name {i}", key, email, "", f"p{i % 3}"])
    return write_csv(path, HEADER, records)


async def _file_blocks(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as handle:
        while block := handle.read(64 * 1024):
            yield block


async def upload_job(
    env: Env,
    client_id: int,
    path: Path,
    *,
    status: JobStatus = JobStatus.UPLOADED,
    user_id: str | None = "u1",
    chunk_size: int = 7,
    partitions: int = 2,
    preview: bool = False,
    layout: dict[str, object] | None = None,
) -> uuid.UUID:
    """Store ``path`` under the client's prefix and create its job, sealed with size and hash
    (``preview``: created with ``preview: true``, its run rests in ``ready``)."""
    job_id = uuid.uuid4()
    key = f"{client_id}/{job_id}/{path.name}"
    stored = await env.objects.put_stream(key, _file_blocks(path), 1 << 30)
    new_job = NewJob(
        id=job_id,
        client_id=client_id,
        user_id=user_id,
        source=key,
        input_format=format_for(path.name).value,
        strategy="merge",
        chunk_size=chunk_size,
        partitions=partitions,
        bytes_total=stored.size,
        source_size=stored.size,
        source_sha256=stored.sha256,
        filename=path.name,
        tags=("t1", "t2"),
        preview=preview,
        layout=layout,
    )
    await env.store.create_job(new_job, status)
    return job_id


async def bare_job(
    env: Env, client_id: int, status: JobStatus, *, user_id: str | None = "u1"
) -> uuid.UUID:
    """A job whose file is never read (lists, starts, cancels)."""
    job_id = uuid.uuid4()
    new_job = NewJob(
        id=job_id,
        client_id=client_id,
        user_id=user_id,
        source=f"{client_id}/{job_id}/f.csv",
        input_format="csv",
        strategy="merge",
        chunk_size=10,
        partitions=1,
        source_size=1,
        source_sha256="0" * 64,
        filename="f.csv",
    )
    await env.store.create_job(new_job, status)
    return job_id


async def eventually(probe: Callable[[], Awaitable[T | None]], timeout_s: float = WAIT_S) -> T:
    """Poll ``probe`` (a read of the database) until it returns a value; bounded."""
    deadline = time.monotonic() + timeout_s
    while (value := await probe()) is None:
        assert time.monotonic() < deadline, "the database never reached the awaited state"
        await asyncio.sleep(0.01)
    return value


async def ledger(dsn: str, job_id: uuid.UUID) -> Counters:
    """The chunk ledger's sums: the truthful counters of a job, whatever its status."""
    rows = await fetch(
        dsn,
        "SELECT count(*) AS chunks, coalesce(sum(rows_read), 0) AS rows_read,"
        " coalesce(sum(inserted), 0) AS inserted, coalesce(sum(updated), 0) AS updated,"
        " coalesce(sum(invalid), 0) AS invalid, coalesce(sum(error), 0) AS error,"
        " coalesce(sum(ignored), 0) AS ignored FROM import_chunk WHERE job_id = $1",
        job_id,
    )
    r = rows[0]
    return Counters(
        r["rows_read"], r["inserted"], r["updated"], r["invalid"], r["error"], r["ignored"]
    )


async def ledger_chunks(dsn: str, job_id: uuid.UUID) -> int:
    rows = await fetch(dsn, "SELECT count(*) AS n FROM import_chunk WHERE job_id = $1", job_id)
    return int(rows[0]["n"])


async def notification_type(dsn: str, job_id: uuid.UUID) -> str:
    rows = await fetch(
        dsn,
        "SELECT payload->>'type' AS type FROM outbox"
        " WHERE topic = 'notification' AND payload->>'job_id' = $1",
        str(job_id),
    )
    assert len(rows) == 1, rows
    return str(rows[0]["type"])


def as_tuple(c: Counters) -> tuple[int, ...]:
    return (c.rows_read, c.inserted, c.updated, c.invalid, c.error, c.ignored)


@contextlib.asynccontextmanager
async def job_env(dsn: str, tmp_path: Path) -> AsyncIterator[Env]:
    """A job queue with its LISTEN dsn, the API's and the owner's job classes and a local object
    store, closed at the end."""
    pool = await connect_pool(dsn, 8)
    store = PostgresJobQueue(pool, dsn=dsn)
    objects = LocalObjectStore(tmp_path / "objects")
    await objects.ensure_bucket()
    try:
        yield Env(dsn, pool, store, objects, PostgresJobViews(pool), PostgresAdmin(pool))
    finally:
        await store.close()
        await pool.close()
