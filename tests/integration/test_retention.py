"""Retention (issue 15 point 4, LGPD) on the real PostgreSQL and object store, with an
injected clock: a worker's sweep purges the personal data of the imports that ended longer ago
than IMPORTER_RETENTION_DAYS — the uploaded file, the raw values of the error and duplicate
reports, the undo journal — once, leaves the younger ones alone, counts what it purged, and the
undo of a purged import is refused ``retention_expired``."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from importer.adapters.postgres.columns import PostgresColumns
from importer.adapters.postgres.undo import PostgresUndo
from importer.adapters.storage.local import LocalObjectStore
from importer.core.errors import ObjectNotFoundError, RetentionExpiredError
from importer.core.models import JobStatus
from importer.services.documents import job_document
from importer.services.undo import undo_import
from importer.services.worker import Worker
from importer.settings import Settings
from tests.jobs_support import WAIT_S, Env, contacts_csv, job_env, ledger_chunks, upload_job
from tests.support import fetch

pytestmark = pytest.mark.integration

DAYS = 30


@pytest.fixture
async def env(db_dsn: str, tmp_path: Path) -> AsyncIterator[Env]:
    async with job_env(db_dsn, tmp_path) as opened:
        yield opened


class Counted:
    """A pipeline observer counting the retention sweeps' purges."""

    def __init__(self) -> None:
        self.purged: list[tuple[int, int, int, int]] = []

    def on_retention(self, jobs: int, objects: int, raw_values: int, journal_rows: int) -> None:
        self.purged.append((jobs, objects, raw_values, journal_rows))

    def __getattr__(self, name: str) -> object:  # every other event: nothing
        return lambda *args, **kwargs: None


def _worker(env: Env, now: dt.datetime, observer: Counted | None = None) -> Worker:
    settings = Settings(database_url=env.dsn, worker_poll_seconds=0.05, retention_days=DAYS)
    return Worker(
        env.store,
        env.objects,
        settings,
        owner="w1",
        stop=asyncio.Event(),
        burst=True,
        local_files=LocalObjectStore,
        observer=observer,  # type: ignore[arg-type]
        clock=lambda: now,
    )


async def _completed(env: Env, client: int, path: Path) -> object:
    job_id = await upload_job(env, client, path, chunk_size=7, partitions=2)
    await env.views.start_job(client, job_id, f"start:{job_id}")
    await asyncio.wait_for(_worker(env, dt.datetime.now(dt.UTC)).run(), WAIT_S)
    return job_id


async def _counts(env: Env, job_id: object) -> tuple[int, int, int]:
    rows = await fetch(
        env.dsn,
        "SELECT (SELECT count(*) FROM import_row_error WHERE job_id = $1 AND value IS NOT NULL)"
        " AS raw, (SELECT count(*) FROM import_journal WHERE job_id = $1"
        " AND cardinality(created) > 0) AS created,"
        " (SELECT count(*) FROM import_journal WHERE job_id = $1"
        " AND cardinality(created) = 0) AS journaled",
        job_id,
    )
    return rows[0]["raw"], rows[0]["created"], rows[0]["journaled"]


async def test_the_sweep_purges_the_imports_past_their_retention_once(
    env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    client = next(client_ids)
    old = await _completed(env, client, contacts_csv(tmp_path / "old.csv", 60))
    young = await _completed(env, client, contacts_csv(tmp_path / "young.csv", 40, first=20))
    await env.pool.execute(
        "UPDATE import_job SET finished_at = now() - interval '31 days' WHERE id = $1", old
    )
    await env.pool.execute(  # as a channel-keyed run keeps them (core.keys.KeyGroups)
        "INSERT INTO import_key_groups VALUES ($1, false, '{b@x.com}', '{a@x.com}')", old
    )
    raw, created, journaled = await _counts(env, old)
    assert raw > 0
    assert created > 0
    assert await ledger_chunks(env.dsn, old) > 0
    view = await env.views.view_job(client, old)  # type: ignore[arg-type]
    assert view.retained_until is not None
    document = job_document(view, dt.datetime.now(dt.UTC))
    assert document["undo_available_until"] == view.retained_until.isoformat()

    observer = Counted()
    await _worker(env, dt.datetime.now(dt.UTC), observer).sweep_retention(force=True)
    assert await _counts(env, old) == (0, 0, 0)
    assert await ledger_chunks(env.dsn, old) == 0  # issue 26: its chunk ledger goes too
    assert (await _counts(env, young))[0] > 0  # younger than the retention: kept
    assert await ledger_chunks(env.dsn, young) > 0
    ((jobs, objects, raw_values, journal_rows),) = observer.purged
    assert (jobs, objects) == (1, 1)
    assert raw_values >= raw + 1
    assert journal_rows >= created + journaled
    groups = await fetch(env.dsn, "SELECT 1 FROM import_key_groups WHERE job_id = $1", old)
    assert not groups
    job = await env.store.get_job(old)  # type: ignore[arg-type]
    with pytest.raises(ObjectNotFoundError):
        await env.objects.stat(job.source)
    lines = await fetch(
        env.dsn, "SELECT count(*) AS n FROM import_row_error WHERE job_id = $1", old
    )
    assert lines[0]["n"] == raw  # lines and reasons stay
    purged = await env.views.view_job(client, old)  # type: ignore[arg-type]
    assert purged.purged_at is not None

    with pytest.raises(RetentionExpiredError):
        await undo_import(PostgresUndo(env.pool), env.store, client, old)  # type: ignore[arg-type]

    again = Counted()
    await _worker(env, dt.datetime.now(dt.UTC), again).sweep_retention(force=True)
    assert again.purged == [(0, 0, 0, 0)]  # once

    later = Counted()  # an injected clock 40 days on: the young import is due too
    await _worker(env, dt.datetime.now(dt.UTC) + dt.timedelta(days=40), later).sweep_retention(
        force=True
    )
    assert later.purged[0][0] == 1
    status = (await env.views.view_job(client, young)).status  # type: ignore[arg-type]
    assert status in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_PLACEHOLDERS)


async def test_a_purged_import_takes_its_columns_out_of_the_clients_memory(
    env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    """The columns step's memory (issue 29) is the client's data: each import's mapping counts
    while the import's data is kept, and the sweep takes it back out."""
    client = next(client_ids)
    columns = PostgresColumns(env.pool)
    mapping = {"columns": [{"column": "cpf", "target": "cpf_cnpj"}], "unmapped": "ignore"}
    pairs = [("cpf", "cpf_cnpj"), ("nome", "ignore")]
    jobs = []
    for name, first in (("old.csv", 0), ("young.csv", 30)):
        job_id = await upload_job(env, client, contacts_csv(tmp_path / name, 20, first=first))
        assert await columns.set_mapping(client, job_id, mapping, pairs)
        await env.views.start_job(client, job_id, f"start:{job_id}")
        await asyncio.wait_for(_worker(env, dt.datetime.now(dt.UTC)).run(), WAIT_S)
        jobs.append(job_id)
    assert not await columns.set_mapping(client, jobs[0], mapping, pairs)  # started: refused

    async def uses() -> dict[str, int]:
        return {e.header_key: e.uses for e in await columns.memory(client)}

    assert await uses() == {"cpf": 2, "nome": 2}
    await env.pool.execute(
        "UPDATE import_job SET finished_at = now() - interval '31 days' WHERE id = $1", jobs[0]
    )
    await _worker(env, dt.datetime.now(dt.UTC)).sweep_retention(force=True)
    assert await uses() == {"cpf": 1, "nome": 1}
    await _worker(env, dt.datetime.now(dt.UTC) + dt.timedelta(days=40)).sweep_retention(force=True)
    assert await uses() == {}
    assert await columns.memory(next(client_ids)) == []
