"""The duplicate-resolution report on the real PostgreSQL: written in each batch's transaction,
combined over the chunks a key's rows fall in, its winners the contacts' final values."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from importer.adapters.postgres.admin import PostgresAdmin
from importer.adapters.postgres.duplicates import duplicate_rows
from importer.adapters.postgres.pool import connect_pool
from importer.core import failpoints
from importer.core.duplicates import Competition
from importer.core.models import ConflictStrategy
from tests.support import cpf, db_state, fetch, import_file, write_csv

pytestmark = pytest.mark.integration

HEADER = ["nome", "cpf", "email", "plano"]
A, B, C = cpf(1), cpf(2), cpf(3)


def repeats() -> list[list[str]]:
    return [
        ["Ana", A, "ana@x.com.br", "gold"],  # 2
        ["Bruno", B, "", ""],  # 3: once, new: nothing to report
        ["Ana Maria", A, "", ""],  # 4: a later chunk, the stored "Ana"
        ["Carla", C, "", "silver"],  # 5: the stored contact "Carol"
        ["Ana M.", A, "", "gold"],  # 6
        ["Ana Maria", A, "", "platinum"],  # 7: same chunk as 6
    ]


async def report(dsn: str, job_id: object) -> list[Competition]:
    pool = await connect_pool(dsn, 2)
    try:
        return [row async for row in duplicate_rows(pool, job_id)]  # type: ignore[arg-type]
    finally:
        await pool.close()


async def stored_rows(dsn: str, job_id: object) -> int:
    rows = await fetch(dsn, "SELECT count(*) AS n FROM import_duplicate WHERE job_id = $1", job_id)
    return int(rows[0]["n"])


async def test_repeats_across_chunks_combine_into_one_row(db_dsn: str, tmp_path: Path) -> None:
    client = 61
    await import_file(
        db_dsn, write_csv(tmp_path / "pre.csv", HEADER, [["Carol", C, "", ""]]), client
    )
    path = write_csv(tmp_path / "r.csv", HEADER, repeats())
    outcome = await import_file(db_dsn, path, client, chunk_size=2, concurrency=2)
    rows = await report(db_dsn, outcome.job_id)
    assert rows == [
        # chunk 0 wrote "Ana" and "gold" (line 2, the key once and new): a later chunk's
        # competition with them names line 2, the import's own line, not `stored` (issue 25)
        Competition(A, "custom:plano", "platinum", 7, (2, 6), False, "last_non_empty"),
        Competition(A, "name", "Ana Maria", 7, (2, 6), False, "last_non_empty"),  # 4 had it too
        Competition(C, "name", "Carla", 5, (), True, "last_non_empty"),  # stored before
    ]
    state = await db_state(db_dsn, client)
    for row in rows:  # the winners are the contacts' final values
        final = state[row.key]
        value = final.name if row.field == "name" else final.custom_fields["plano"]
        assert row.winner_value == value


async def test_policy_and_discard_name_the_stored_winner(db_dsn: str, tmp_path: Path) -> None:
    client = 62
    await import_file(
        db_dsn, write_csv(tmp_path / "pre.csv", HEADER, [["Carol", C, "", ""]]), client
    )
    path = write_csv(tmp_path / "r.csv", HEADER, repeats())
    layout = {"merge": {"name": "keep_existing"}}
    kept = await import_file(db_dsn, path, client, layout_document=layout, chunk_size=10)
    assert Competition(C, "name", "Carol", None, (5,), False, "keep_existing") in await report(
        db_dsn, kept.job_id
    )
    discarded = await import_file(db_dsn, path, client, ConflictStrategy.DISCARD, chunk_size=10)
    rows = await report(db_dsn, discarded.job_id)
    assert {(r.key, r.field, r.winner_line, r.rule) for r in rows} >= {
        (A, "name", None, "discard"),
        (C, "name", None, "discard"),
    }


@pytest.fixture
def injected_errors() -> Iterator[None]:
    failpoints.configure("after_copy_before_commit=error@2")
    try:
        yield
    finally:
        failpoints.configure("")


@pytest.mark.usefixtures("injected_errors")
async def test_a_retried_batch_leaves_no_row_twice(db_dsn: str, tmp_path: Path) -> None:
    path = write_csv(tmp_path / "r.csv", HEADER, repeats() * 3)
    disturbed = await import_file(db_dsn, path, 63, chunk_size=4, concurrency=1)
    assert failpoints.armed is not None
    assert failpoints.armed.hits("after_copy_before_commit") == 5 + 1  # one batch twice
    failpoints.configure("")
    undisturbed = await import_file(db_dsn, path, 64, chunk_size=4, concurrency=1)
    assert await report(db_dsn, disturbed.job_id) == await report(db_dsn, undisturbed.job_id)
    assert await stored_rows(db_dsn, disturbed.job_id) == await stored_rows(
        db_dsn, undisturbed.job_id
    )


async def test_off_computes_nothing_and_remove_data_clears_it(db_dsn: str, tmp_path: Path) -> None:
    path = write_csv(tmp_path / "r.csv", HEADER, repeats())
    off = await import_file(db_dsn, path, 65, duplicates_report=False)
    assert await stored_rows(db_dsn, off.job_id) == 0
    on = await import_file(db_dsn, path, 66)
    assert await stored_rows(db_dsn, on.job_id) > 0
    pool = await connect_pool(db_dsn, 2)
    try:
        await PostgresAdmin(pool).remove_job_data(66, on.job_id)
    finally:
        await pool.close()
    assert await stored_rows(db_dsn, on.job_id) == 0


async def test_an_earlier_chunks_line_is_named_not_stored(db_dsn: str, tmp_path: Path) -> None:
    """Issue 25 §4: the competing value came from an earlier chunk of the same import — a new
    key's row, a row that filled a stored contact's empty field, DISCARD's first row: the report
    names that line; a value stored before the import stays `stored`."""
    client = 68
    pre = write_csv(tmp_path / "pre.csv", HEADER, [["", B, "", "p0"]])
    await import_file(db_dsn, pre, client)
    await import_file(db_dsn, pre, client + 1)
    rows = [
        ["Ana", A, "", ""],  # 2: new
        ["Bia", B, "", ""],  # 3: fills B's empty name
        ["Ana B", A, "", ""],  # 4: a later chunk
        ["Bia B", B, "", "p9"],  # 5: a later chunk; p0 was stored before
    ]
    path = write_csv(tmp_path / "r.csv", HEADER, rows)
    merged = await import_file(db_dsn, path, client, chunk_size=2, concurrency=1)
    assert await report(db_dsn, merged.job_id) == [
        Competition(A, "name", "Ana B", 4, (2,), False, "last_non_empty"),
        Competition(B, "custom:plano", "p9", 5, (), True, "last_non_empty"),
        Competition(B, "name", "Bia B", 5, (3,), False, "last_non_empty"),
    ]
    discarded = await import_file(
        db_dsn, path, client + 1, ConflictStrategy.DISCARD, chunk_size=2, concurrency=1
    )
    assert await report(db_dsn, discarded.job_id) == [
        Competition(A, "name", "Ana", 2, (4,), False, "discard"),  # A's first row won
        Competition(B, "custom:plano", "p0", None, (5,), False, "discard"),  # stored before
        Competition(B, "name", None, None, (3, 5), False, "discard"),  # the stored contact's
    ]


async def test_values_survive_the_json_round_trip(db_dsn: str, tmp_path: Path) -> None:
    odd = 'Zé "aspas", \\ barra\nnova linha 🙂'
    path = write_csv(tmp_path / "o.csv", HEADER, [["Ana", A, "", ""], [odd, A, "", ""]])
    outcome = await import_file(db_dsn, path, 67)
    assert await report(db_dsn, outcome.job_id) == [
        Competition(A, "name", odd, 3, (2,), False, "last_non_empty")
    ]
    assert await stored_rows(db_dsn, outcome.job_id) == 1  # one row per batch
