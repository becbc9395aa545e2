"""Catalog T39 and T41 on the real PostgreSQL: an undo racing a new import of the same client
ends in some serial order, never half-undone; a retention sweep concurrent with an undo either
purges first (the undo answers ``retention_expired``, nothing undone) or leaves the undo's
journal alone (the undo ends at the state before the import) — never a journal purged under a
running undo."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.postgres.undo import PostgresUndo
from importer.adapters.storage.local import LocalObjectStore
from importer.core.errors import RetentionExpiredError, UndoConflictError
from importer.core.models import TERMINAL_STATUSES
from importer.services.undo import undo_import
from importer.services.worker import Worker
from importer.settings import Settings
from tests.jobs_support import Env, job_env
from tests.support import Contact, cpf, db_contacts, fetch, import_file, live_checksum, write_csv

pytestmark = pytest.mark.integration

_clients = itertools.count(78_000)
HEADER = ("nome", "cpf", "email", "plano")
PRE = [("Ana", cpf(1), "", "p0"), ("Bia", cpf(2), "bia@x.com", "")]
A = [("Ana A", cpf(1), "ana@x.com", "p1"), ("Caio", cpf(3), "", "p2"), ("Bia", cpf(2), "", "p3")]
B_TOUCHING = [("Ana B", cpf(1), "", "p4"), ("Duda", cpf(4), "d@x.com", "")]
B_APART = [("Duda", cpf(4), "d@x.com", ""), ("Edu", cpf(5), "", "p5")]


async def _undo(dsn: str, job_id: object, client: int | None = None) -> None:
    pool = await connect_pool(dsn, 4)
    try:
        await undo_import(PostgresUndo(pool), PostgresJobQueue(pool), client, job_id)  # type: ignore[arg-type]
    finally:
        await pool.close()


async def _status(dsn: str, job_id: object) -> str:
    return str((await fetch(dsn, "SELECT status FROM import_job WHERE id = $1", job_id))[0][0])


def _files(tmp: Path, b_rows: list[tuple[str, ...]]) -> tuple[Path, Path, Path]:
    return (
        write_csv(tmp / "pre.csv", HEADER, PRE),
        write_csv(tmp / "a.csv", HEADER, A),
        write_csv(tmp / "b.csv", HEADER, b_rows),
    )


async def _serial_outcomes(dsn: str, files: tuple[Path, Path, Path]) -> dict[str, list[Contact]]:
    """The client's contacts after each serial order, on reference clients: the undo of A then
    B; B then the undo of A (refused when B changed A's contacts)."""
    pre, a, b = files
    outcomes = {}
    for order in ("undo_first", "import_first"):
        client = next(_clients)
        await import_file(dsn, pre, client)
        first = await import_file(dsn, a, client)
        if order == "undo_first":
            await _undo(dsn, first.job_id, client)
            await import_file(dsn, b, client)
        else:
            await import_file(dsn, b, client)
            with contextlib.suppress(UndoConflictError):
                await _undo(dsn, first.job_id, client)
        outcomes[order] = await db_contacts(dsn, client)
    return outcomes


@pytest.mark.parametrize("b_rows", [B_TOUCHING, B_APART], ids=["b_touches_a", "b_apart"])
@pytest.mark.parametrize("undo_created_first", [True, False])
def test_an_undo_racing_an_import_of_the_same_client_ends_in_a_serial_order(
    db_dsn: str, tmp_path: Path, b_rows: list[tuple[str, ...]], undo_created_first: bool
) -> None:
    """T39: the undo of A and the import of B start together. They take the client's import
    turn one after the other: the result is the result of one serial order, A is ``undone`` or
    (B changed its contacts first) refused ``undo_conflict`` and still completed — never
    ``undoing``, never half-undone."""

    async def run() -> None:
        files = _files(tmp_path, b_rows)
        outcomes = await _serial_outcomes(db_dsn, files)
        client = next(_clients)
        pre, a, b = files
        await import_file(db_dsn, pre, client)
        first = await import_file(db_dsn, a, client)
        racing = [_undo(db_dsn, first.job_id, client), import_file(db_dsn, b, client)]
        if not undo_created_first:
            racing.reverse()
        results = await asyncio.gather(*racing, return_exceptions=True)
        refused = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(r, UndoConflictError) for r in refused), refused
        status = await _status(db_dsn, first.job_id)
        found = await db_contacts(db_dsn, client)
        if status == "undone":
            assert not refused
            assert found == outcomes["undo_first"]
        else:
            assert status == "completed"
            assert refused  # B changed A's contacts first
            assert found == outcomes["import_first"]
        if b_rows is B_APART:  # both orders agree when B leaves A's contacts alone
            assert status == "undone"
            assert found == outcomes["import_first"] == outcomes["undo_first"]

    asyncio.run(run())


# --- T41: retention concurrent with an undo ------------------------------------------------

DAYS = 30


@pytest.fixture
async def env(db_dsn: str, tmp_path: Path) -> AsyncIterator[Env]:
    async with job_env(db_dsn, tmp_path) as opened:
        yield opened


def _sweeper(env: Env, now: dt.datetime) -> Worker:
    """A worker whose clock is ``now`` (injected), for its retention sweep."""
    settings = Settings(database_url=env.dsn, worker_poll_seconds=0.05, retention_days=DAYS)
    return Worker(
        env.store,
        env.objects,
        settings,
        owner="sweeper",
        stop=asyncio.Event(),
        burst=True,
        local_files=LocalObjectStore,
        clock=lambda: now,
    )


async def _journal_rows(env: Env, job_id: object) -> int:
    rows = await fetch(env.dsn, "SELECT count(*) FROM import_journal WHERE job_id = $1", job_id)
    return int(rows[0][0])


async def _imported(env: Env, tmp: Path, client: int) -> tuple[object, dict[str, str]]:
    """The preload, then import A in chunks of one (a slice per batch); the state before A."""
    await import_file(env.dsn, write_csv(tmp / "pre.csv", HEADER, PRE), client)
    before = await live_checksum(env.dsn, client)
    first = await import_file(env.dsn, write_csv(tmp / "a.csv", HEADER, A), client, chunk_size=1)
    return first.job_id, before


async def test_a_sweep_between_the_undos_slices_leaves_its_journal_alone(
    env: Env, tmp_path: Path
) -> None:
    """T41, the sweep's own interleaving: it found A due (its clock 40 days on) while A was
    completed; the undo began and ran a slice; then the sweep purges A. It must purge nothing of
    a job being undone (else the undo would end ``undone`` half-way); the undo ends at the state
    before A, and a later sweep purges the undone import."""
    client = next(_clients)
    job_id, before = await _imported(env, tmp_path, client)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=40)
    due = await env.store.retention_due(later - dt.timedelta(days=DAYS), 100)
    assert job_id in [d.job_id for d in due]
    undo = PostgresUndo(env.pool)
    await undo.begin_undo(client, job_id)  # type: ignore[arg-type]
    assert await undo.undo_slice(job_id)  # type: ignore[arg-type]
    left = await _journal_rows(env, job_id)
    assert left > 0
    purged = await env.store.purge_job(job_id, later)  # type: ignore[arg-type]
    assert purged.jobs == 0
    assert await _journal_rows(env, job_id) == left
    while await undo.undo_slice(job_id):  # type: ignore[arg-type]
        pass
    assert await _status(env.dsn, job_id) == "undone"
    assert await live_checksum(env.dsn, client) == before
    await _sweeper(env, later).sweep_retention(force=True)
    rows = await fetch(env.dsn, "SELECT purged_at FROM import_job WHERE id = $1", job_id)
    assert rows[0]["purged_at"] is not None


@pytest.mark.parametrize("sweep_created_first", [True, False])
async def test_a_retention_sweep_racing_an_undo_never_leaves_it_half_undone(
    env: Env, tmp_path: Path, sweep_created_first: bool
) -> None:
    """T41: the sweep (its clock 40 days on: A is due) and the undo of A start together. Either
    the sweep purged first — the undo answers ``retention_expired`` and A's contacts stay as A
    left them — or the undo ran — A ends ``undone`` at the state before it. Never anything
    between; A's status is never left ``undoing``."""
    client = next(_clients)
    job_id, before = await _imported(env, tmp_path, client)
    after = await live_checksum(env.dsn, client)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=40)
    racing = [
        _sweeper(env, later).sweep_retention(force=True),
        undo_import(PostgresUndo(env.pool), env.store, client, job_id),  # type: ignore[arg-type]
    ]
    if not sweep_created_first:
        racing.reverse()
    results = await asyncio.gather(*racing, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    status = await _status(env.dsn, job_id)
    if errors:
        assert [type(e) for e in errors] == [RetentionExpiredError]
        assert status == "completed"
        assert await live_checksum(env.dsn, client) == after
    else:
        assert status == "undone"
        assert await live_checksum(env.dsn, client) == before
    assert status in {s.value for s in TERMINAL_STATUSES} | {"undone"}
