"""Bounded tables (issue 26 point 3) on the real PostgreSQL: the retention sweep deletes the
outbox messages and webhook deliveries past their days, in batches, and leaves the young and
the pending ones; an import's error report stores at most IMPORTER_MAX_ROW_ERRORS rows and
counts the rest, which its status document shows; the counters still count every row."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.postgres.views import PostgresJobViews
from importer.adapters.storage.files import LocalFileSource
from importer.core.models import ConflictStrategy, InputFormat, JobStatus
from importer.services import maintenance
from importer.services.admin import job_status
from importer.services.local import ImportRequest, import_source
from importer.settings import Settings
from tests.jobs_support import Env, bare_job, job_env
from tests.support import bad_cpf, cpf, fetch, write_csv

pytestmark = pytest.mark.integration

NOW = dt.datetime.now(dt.UTC)


@pytest.fixture
async def env(db_dsn: str, tmp_path: Path) -> AsyncIterator[Env]:
    async with job_env(db_dsn, tmp_path) as opened:
        yield opened


async def _sweep(env: Env, *, broker: bool = True) -> maintenance.Swept:
    settings = Settings(
        database_url=env.dsn,
        outbox_retention_days=7,
        webhook_retention_days=30,
        rabbitmq_url="amqp://unused" if broker else None,
    )
    return await maintenance.sweep_retention(env.store, env.objects, settings, NOW)


async def _outbox(env: Env, name: str, *, created_days: int, published_days: int | None) -> None:
    published = None if published_days is None else NOW - dt.timedelta(days=published_days)
    await env.pool.execute(
        "INSERT INTO outbox (message_id, topic, payload, created_at, published_at)"
        " VALUES ($1, 'notification', '{}', $2, $3)",
        name,
        NOW - dt.timedelta(days=created_days),
        published,
    )


async def _names(env: Env, query: str) -> set[str]:
    return {r[0] for r in await env.pool.fetch(query)}


async def test_the_sweep_deletes_outbox_messages_published_past_their_days_in_batches(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(maintenance, "SWEEP_BATCH", 2)  # 5 due: three transactions
    for i in range(5):
        await _outbox(env, f"old:{i}", created_days=9, published_days=8)
    await _outbox(env, "young", created_days=9, published_days=6)
    await _outbox(env, "pending", created_days=9, published_days=None)

    swept = await _sweep(env)

    assert swept.outbox == 5
    remaining = await _names(env, "SELECT message_id FROM outbox")
    assert remaining == {"young", "pending"}  # a broker's relay will still publish it


async def test_without_a_broker_the_sweep_deletes_the_unpublished_messages_too(env: Env) -> None:
    """Without RABBITMQ_URL nobody publishes the outbox: past its days, a message goes."""
    await _outbox(env, "old", created_days=8, published_days=None)
    await _outbox(env, "young", created_days=1, published_days=None)

    swept = await _sweep(env, broker=False)

    assert swept.outbox == 1
    assert await _names(env, "SELECT message_id FROM outbox") == {"young"}


async def _delivery(env: Env, job_id: uuid.UUID, name: str, ended: str | None, days: int) -> None:
    at = NOW - dt.timedelta(days=days)
    await env.pool.execute(
        "INSERT INTO webhook_delivery (delivery_id, job_id, client_id, event, url, attempts,"
        " delivered_at, gave_up_at, created_at)"
        " VALUES ($1, $2, 1, 'import_done', 'https://example.com/', 2, $3, $4, $5)",
        name,
        job_id,
        at if ended == "delivered" else None,
        at if ended == "gave_up" else None,
        at,
    )
    await env.pool.execute(
        "INSERT INTO webhook_attempt (delivery_id, attempt, started_at, status_code)"
        " SELECT $1, n, $2, 500 FROM generate_series(1, 2) AS n",
        name,
        at,
    )


async def test_the_sweep_deletes_ended_webhook_deliveries_with_their_attempts(
    env: Env, client_ids: Iterator[int]
) -> None:
    job_id = await bare_job(env, next(client_ids), JobStatus.COMPLETED)
    await _delivery(env, job_id, "delivered-old", "delivered", 31)
    await _delivery(env, job_id, "gave-up-old", "gave_up", 40)
    await _delivery(env, job_id, "delivered-young", "delivered", 29)
    await _delivery(env, job_id, "pending-old", None, 45)  # still being retried: kept

    swept = await _sweep(env)

    assert swept.webhooks == 2
    kept = {"delivered-young", "pending-old"}
    assert await _names(env, "SELECT delivery_id FROM webhook_delivery") == kept
    assert await _names(env, "SELECT DISTINCT delivery_id FROM webhook_attempt") == kept


HEADER = ["nome", "cpf", "email"]


def _wrong_file(path: Path, rows: int) -> Path:
    """A file that is mostly wrong: every other key invalid, every fifth e-mail too."""
    records = []
    for i in range(rows):
        key = bad_cpf(i) if i % 2 else cpf(50_000 + i)
        email = "nope" if i % 5 == 0 else f"c{i}@example.com"
        records.append([f"N{i}", key, email])
    return write_csv(path, HEADER, records)


async def _import(dsn: str, path: Path, client_id: int, cap: int, **options: object) -> uuid.UUID:
    settings = Settings(database_url=dsn, chunk_size=25, concurrency=2, max_row_errors=cap)
    request = ImportRequest(
        client_id=client_id,
        strategy=ConflictStrategy.MERGE,
        input_format=InputFormat.CSV,
        chunk_size=25,
        concurrency=2,
        **options,  # type: ignore[arg-type]
    )
    pool = await connect_pool(dsn, 4)
    try:
        store = PostgresJobQueue(pool, max_row_errors=cap)
        outcome = await import_source(store, LocalFileSource(path), request, settings)
    finally:
        await pool.close()
    assert outcome.counters.balanced, outcome.counters
    assert outcome.counters.invalid == 200  # every row still counted
    return outcome.job_id


async def _report_rows(dsn: str, job_id: uuid.UUID) -> int:
    rows = await fetch(dsn, "SELECT count(*) AS n FROM import_row_error WHERE job_id = $1", job_id)
    return int(rows[0]["n"])


@pytest.mark.parametrize("max_invalid", [None, "100%"], ids=["batches", "validated-first"])
async def test_the_error_report_stores_up_to_its_cap_and_counts_the_rest(
    db_dsn: str, tmp_path: Path, client_ids: Iterator[int], max_invalid: str | None
) -> None:
    """400 rows: 200 invalid keys and 80 bad e-mails (280 issues), cap 30.
    ``validated-first``: the whole file is validated before the batches (its issues are written
    outside them)."""
    client = next(client_ids)
    path = _wrong_file(tmp_path / "wrong.csv", 400)

    job_id = await _import(db_dsn, path, client, 30, max_invalid=max_invalid)

    assert await _report_rows(db_dsn, job_id) == 30
    pool = await connect_pool(db_dsn, 1)
    try:
        document = await job_status(PostgresJobViews(pool), job_id, dt.datetime.now(dt.UTC))
    finally:
        await pool.close()
    assert document["report_rows_left_out"] == 280 - 30


async def test_an_import_under_its_cap_stores_its_whole_report(
    db_dsn: str, tmp_path: Path, client_ids: Iterator[int]
) -> None:
    path = _wrong_file(tmp_path / "wrong.csv", 400)
    job_id = await _import(db_dsn, path, next(client_ids), 1_000)
    assert await _report_rows(db_dsn, job_id) == 280
    tally = await fetch(db_dsn, "SELECT left_out FROM import_error_tally WHERE job_id = $1", job_id)
    assert tally[0]["left_out"] == 0


async def test_removing_an_imports_data_resets_its_tally(
    env: Env, tmp_path: Path, client_ids: Iterator[int]
) -> None:
    """A requeue after remove-data reports afresh: its run has the whole cap again."""
    job_id = await _import(env.dsn, _wrong_file(tmp_path / "w.csv", 400), next(client_ids), 30)
    await env.admin.remove_job_data(None, job_id)
    assert await _report_rows(env.dsn, job_id) == 0
    assert not await fetch(env.dsn, "SELECT 1 FROM import_error_tally WHERE job_id = $1", job_id)
