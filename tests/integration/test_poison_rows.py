"""Poison rows on the real PostgreSQL: a row that passes validation but that the database refuses
(a CHECK added in this test's own database only) is rejected alone, with its line; every other
row lands, and the result equals the reference model run on the file without it."""

from __future__ import annotations

import uuid
from pathlib import Path

import asyncpg
import pytest

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.postgres.store import PostgresStore
from importer.adapters.storage.files import LocalFileSource
from importer.core.config import PipelineConfig
from importer.core.models import (
    Batch,
    ConflictStrategy,
    ContactRow,
    Counters,
    InputFormat,
    Job,
    JobStatus,
    Limits,
)
from importer.core.reference import ReferenceModel
from importer.pipeline.run import ImportRun
from importer.services.local import ImportRequest, import_source
from importer.settings import Settings
from tests.jobs_support import ledger
from tests.support import cpf, db_state, fetch, import_file, write_csv

pytestmark = pytest.mark.integration

POISON = "POISON"
ROWS = 300


async def forbid_poison(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "ALTER TABLE contact ADD CONSTRAINT test_no_poison"
            f" CHECK (name IS DISTINCT FROM '{POISON}')"
        )
    finally:
        await conn.close()


def contacts(poison: set[int]) -> list[tuple[str, str]]:
    """(name, key) per data row; keys repeat (170 distinct), poison rows get keys of their own."""
    return [
        (POISON, cpf(5000 + i)) if i in poison else (f"N{i}", cpf(1000 + i % 170))
        for i in range(ROWS)
    ]


def write(path: Path, rows: list[tuple[str, str]]) -> Path:
    return write_csv(path, ["nome", "cpf"], [list(r) for r in rows])


def reference(
    client: int, rows: list[tuple[str, str]], strategy: ConflictStrategy
) -> tuple[ReferenceModel, Counters]:
    """The reference model run on the file without its poison rows."""
    model = ReferenceModel()
    valid = [
        ContactRow(line=i + 2, cpf_cnpj=key, name=name, street_address=None)
        for i, (name, key) in enumerate(rows)
        if name != POISON
    ]
    return model, model.apply(client, valid, strategy)


async def rejected(dsn: str, job_id: uuid.UUID) -> list[asyncpg.Record]:
    return await fetch(
        dsn,
        "SELECT line, severity, value FROM import_row_error"
        " WHERE job_id = $1 AND reason = 'row_rejected' ORDER BY line",
        job_id,
    )


def assert_matches(got: Counters, expected: Counters, poison: int) -> None:
    assert got.balanced
    assert (got.rows_read, got.error, got.invalid) == (ROWS, poison, 0)
    assert (got.inserted, got.updated, got.ignored) == (
        expected.inserted,
        expected.updated,
        expected.ignored,
    )


@pytest.mark.parametrize("strategy", list(ConflictStrategy))
async def test_one_poison_row_is_rejected_alone(
    db_dsn: str, tmp_path: Path, strategy: ConflictStrategy
) -> None:
    await forbid_poison(db_dsn)
    rows = contacts({137})
    path = write(tmp_path / "p.csv", rows)
    outcome = await import_file(db_dsn, path, 21, strategy, chunk_size=50, concurrency=2)
    model, expected = reference(21, rows, strategy)
    assert outcome.status is JobStatus.COMPLETED
    assert_matches(outcome.counters, expected, 1)
    errors = await rejected(db_dsn, outcome.job_id)
    assert [(e["line"], e["severity"]) for e in errors] == [(139, "error")]  # header is line 1
    assert "test_no_poison" in errors[0]["value"]
    assert await db_state(db_dsn, 21) == model.client_state(21)
    assert await ledger(db_dsn, outcome.job_id) == outcome.counters


async def test_a_poison_update_of_a_stored_key_is_rejected_and_later_rows_apply(
    db_dsn: str, tmp_path: Path
) -> None:
    """MERGE: a POISON name for a key stored earlier fails its update; the key's later rows
    (next chunks) merge into the contact as it was: the model without the poison row."""
    await forbid_poison(db_dsn)
    rows = contacts(set())
    rows[180] = (POISON, rows[10][1])  # key of line 12; the key comes back on line 182
    path = write(tmp_path / "s.csv", rows)
    outcome = await import_file(db_dsn, path, 22, chunk_size=50, concurrency=2)
    model, expected = reference(22, rows, ConflictStrategy.MERGE)
    assert_matches(outcome.counters, expected, 1)
    assert [e["line"] for e in await rejected(db_dsn, outcome.job_id)] == [182]
    assert await db_state(db_dsn, 22) == model.client_state(22)


async def test_a_batch_of_poison_rows_is_rejected_row_by_row(db_dsn: str, tmp_path: Path) -> None:
    await forbid_poison(db_dsn)
    poison = set(range(100, 150))  # the whole third chunk
    rows = contacts(poison)
    path = write(tmp_path / "all.csv", rows)
    outcome = await import_file(db_dsn, path, 23, chunk_size=50, concurrency=2)
    model, expected = reference(23, rows, ConflictStrategy.MERGE)
    assert_matches(outcome.counters, expected, 50)
    lines = [e["line"] for e in await rejected(db_dsn, outcome.job_id)]
    assert lines == [i + 2 for i in sorted(poison)]
    assert await db_state(db_dsn, 23) == model.client_state(23)


class CrashingStore(PostgresJobQueue):
    """Dies (like a killed process) on the first piece it applies after one piece committed."""

    pieces_committed = 0

    async def apply_batch(self, job: Job, batch: Batch, *, lane: bool = False) -> Counters | None:
        if batch.part > 1 and self.pieces_committed:
            raise RuntimeError("the process died")
        applied = await super().apply_batch(job, batch, lane=lane)
        if batch.part > 1:
            self.pieces_committed += 1
        return applied


async def test_a_resumed_run_applies_no_piece_twice(db_dsn: str, tmp_path: Path) -> None:
    await forbid_poison(db_dsn)
    rows = contacts({60, 61, 140})
    path = write(tmp_path / "r.csv", rows)
    pool = await connect_pool(db_dsn, 3)
    try:
        # One consumer: pieces commit strictly one after another, so exactly one is done when
        # the crash comes (with two, the other partition's piece may already be in flight).
        request = ImportRequest(24, ConflictStrategy.MERGE, InputFormat.CSV, 50, 1)
        with pytest.raises(RuntimeError, match="died"):
            await import_source(CrashingStore(pool), LocalFileSource(path), request, Settings())
        job_ids = await fetch(db_dsn, "SELECT id FROM import_job WHERE client_id = 24")
        store = PostgresStore(pool)
        job = await store.get_job(job_ids[0]["id"])
        assert job.status is JobStatus.IMPORTING
        pieces = await fetch(
            db_dsn, "SELECT part FROM import_chunk WHERE job_id = $1 AND part > 1", job.id
        )
        assert len(pieces) == 1  # the crash came mid-split
        run = ImportRun(job, LocalFileSource(path), store, PipelineConfig(limits=Limits()))
        finalized = await run.run()
    finally:
        await pool.close()
    assert finalized is not None
    model, expected = reference(24, rows, ConflictStrategy.MERGE)
    assert_matches(finalized.counters, expected, 3)
    assert [e["line"] for e in await rejected(db_dsn, job.id)] == [62, 63, 142]
    assert await db_state(db_dsn, 24) == model.client_state(24)
    assert await ledger(db_dsn, job.id) == finalized.counters
