"""Undo (issue 15 point 1) on the real PostgreSQL: for random preloads, files, strategies and
merge policies, the client's live contact tables after import + undo are byte for byte those
before it; import A, import B, undo B gives the state after A; undo A while B stands (and B
changed A's contacts) is refused and undoes nothing; another writer's change is a conflict."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.postgres.undo import PostgresUndo
from importer.core.errors import JobNotFoundError, UndoConflictError
from importer.core.models import ConflictStrategy
from importer.services.undo import undo_import
from tests.strategies import GeneratedRow, csv_bytes, merge_documents, rows
from tests.support import fetch, import_file, live_checksum

pytestmark = pytest.mark.integration

_clients = itertools.count(70_000)


async def _undo(dsn: str, job_id: object, client: int | None = None) -> None:
    pool = await connect_pool(dsn, 4)
    try:
        await undo_import(PostgresUndo(pool), PostgresJobQueue(pool), client, job_id)  # type: ignore[arg-type]
    finally:
        await pool.close()


async def _status(dsn: str, job_id: object) -> str:
    return (await fetch(dsn, "SELECT status FROM import_job WHERE id = $1", job_id))[0]["status"]


async def _check(
    dsn: str,
    tmp: Path,
    pre: list[GeneratedRow],
    body: list[GeneratedRow],
    strategy: ConflictStrategy,
    document: dict[str, str],
    chunk_size: int,
) -> None:
    client = next(_clients)
    pre_path, body_path = tmp / "pre.csv", tmp / "body.csv"
    pre_path.write_bytes(csv_bytes(pre))
    body_path.write_bytes(csv_bytes(body))
    if pre:
        await import_file(dsn, pre_path, client)
    before = await live_checksum(dsn, client)
    layout: dict[str, object] = {"merge": document}
    outcome = await import_file(
        dsn, body_path, client, strategy, chunk_size=chunk_size, layout_document=layout
    )
    await _undo(dsn, outcome.job_id, client)
    assert await _status(dsn, outcome.job_id) == "undone"
    assert await live_checksum(dsn, client) == before
    await _undo(dsn, outcome.job_id, client)  # a repeat changes nothing
    assert await live_checksum(dsn, client) == before


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pre=st.lists(rows(key_count=4), max_size=6),
    body=st.lists(rows(key_count=4), min_size=1, max_size=16),
    strategy=st.sampled_from(ConflictStrategy),
    document=merge_documents(),
    chunk_size=st.sampled_from([1, 3, 500]),
)
def test_import_then_undo_leaves_the_live_tables_byte_for_byte_as_before(
    db_dsn: str,
    tmp_path: Path,
    pre: list[GeneratedRow],
    body: list[GeneratedRow],
    strategy: ConflictStrategy,
    document: dict[str, str],
    chunk_size: int,
) -> None:
    asyncio.run(_check(db_dsn, tmp_path, pre, body, strategy, document, chunk_size))


def _file(tmp: Path, name: str, lines: list[str]) -> Path:
    path = tmp / name
    path.write_text("nome,cpf,email,plano\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return path


A_ROWS = ["Ana,52998224725,ana@x.com,p1", "Bia,11144477735,,p2"]
B_ROWS = ["Ana B,52998224725,ana2@x.com,p3", "Caio,39053344705,c@x.com,"]


def test_undo_the_later_import_first_and_a_standing_later_one_refuses(
    db_dsn: str, tmp_path: Path
) -> None:
    """Earlier imports that changed the same contacts (Y created Ana, Z changed her) are not
    among the conflict's imports: only B, which wrote after A, is to be undone first."""

    async def run() -> None:
        client = next(_clients)
        await import_file(db_dsn, _file(tmp_path, "y.csv", ["Ana Y,52998224725,,"]), client)
        await import_file(db_dsn, _file(tmp_path, "z.csv", ["Ana Z,52998224725,,p0"]), client)
        before = await live_checksum(db_dsn, client)
        a = await import_file(db_dsn, _file(tmp_path, "a.csv", A_ROWS), client)
        after_a = await live_checksum(db_dsn, client)
        b = await import_file(db_dsn, _file(tmp_path, "b.csv", B_ROWS), client)
        with pytest.raises(UndoConflictError) as refused:
            await _undo(db_dsn, a.job_id, client)
        conflicts = refused.value.conflicts
        assert conflicts
        assert all(imports == [str(b.job_id)] for _, imports in conflicts)
        assert await _status(db_dsn, a.job_id) == "completed"  # Z created "plano"
        assert await live_checksum(db_dsn, client) != after_a  # nothing was undone
        await _undo(db_dsn, b.job_id, client)
        assert await live_checksum(db_dsn, client) == after_a
        await _undo(db_dsn, a.job_id, client)
        assert await live_checksum(db_dsn, client) == before

    asyncio.run(run())


def test_another_writers_change_is_a_conflict_and_other_tenants_see_no_job(
    db_dsn: str, tmp_path: Path
) -> None:
    async def run() -> None:
        client = next(_clients)
        await import_file(db_dsn, _file(tmp_path, "pre.csv", A_ROWS[:1]), client)
        a = await import_file(
            db_dsn, _file(tmp_path, "a.csv", ["Ana Nova,52998224725,,p9"]), client
        )
        conn = await asyncpg.connect(db_dsn)
        try:
            await conn.execute(
                "UPDATE contact SET name = 'by hand', updated_at = now() WHERE client_id = $1",
                client,
            )
        finally:
            await conn.close()
        with pytest.raises(UndoConflictError) as refused:
            await _undo(db_dsn, a.job_id, client)
        assert [imports for _, imports in refused.value.conflicts] == [[]]  # another writer
        assert "another writer" in str(refused.value)
        with pytest.raises(JobNotFoundError):
            await _undo(db_dsn, a.job_id, client + 1)

    asyncio.run(run())


@pytest.mark.slow
def test_a_hundred_thousand_row_import_undone_leaves_the_tables_as_before(
    db_dsn: str, tmp_path: Path
) -> None:
    """The slow tier's size (issue 15): a generated file of 100k rows — repeats, bad keys,
    custom fields — over 10k preloaded contacts, imported in chunks of 5000 by 4 consumers,
    then undone: the client's live tables byte for byte as before it."""
    from benchmarks.generate import generate

    async def run() -> None:
        client = next(_clients)
        main, pre = tmp_path / "main.csv", tmp_path / "pre.csv"
        await asyncio.to_thread(generate, 100_000, 7, main, preexisting_out=pre, write_meta=False)
        await import_file(db_dsn, pre, client, chunk_size=5000, concurrency=4)
        before = await live_checksum(db_dsn, client)
        outcome = await import_file(db_dsn, main, client, chunk_size=5000, concurrency=4)
        assert outcome.counters.inserted > 0
        await _undo(db_dsn, outcome.job_id, client)
        assert await live_checksum(db_dsn, client) == before

    asyncio.run(run())
