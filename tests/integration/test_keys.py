"""Imports keyed by a channel (layout ``"key"``, core.keys) on the real PostgreSQL: matched by
the key's value among the client's live contacts, ambiguous and missing keys invalid with their
reason, several keys of one contact merged into it, new contacts without a CPF."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.store import PostgresStore
from importer.core import keys
from importer.core.models import JobStatus
from importer.sql import queries
from tests.support import cpf, fetch, import_file, tables_checksum, write_csv

pytestmark = pytest.mark.integration

EMAIL = {"key": "email"}


def _preload(tmp: Path) -> Path:
    """Two contacts share a@x.com (ambiguous); one holds c@x.com and d@x.com."""
    return write_csv(
        tmp / "pre.csv",
        ["cpf", "nome", "email", "plano"],
        [
            [cpf(1), "Ana", "a@x.com", "p1"],
            [cpf(2), "Bia", "a@x.com", ""],
            [cpf(3), "Caio", "c@x.com", "p1"],
            [cpf(3), "", "d@x.com", ""],
        ],
    )


def _body(tmp: Path) -> Path:
    return write_csv(
        tmp / "body.csv",
        ["nome", "email", "celular", "plano"],
        [
            ["Ana Nova", "a@x.com", "", "p2"],  # 2: ambiguous: two contacts have it
            ["Caio C", "d@x.com", "", "p3"],  # 3: contact 3
            ["Caio D", "c@x.com", "(11) 91234-5678", ""],  # 4: contact 3 too, after line 3
            ["Eva", "e@x.com", "", "p9"],  # 5: new, without a CPF
            ["Eva E", "e@x.com", "", ""],  # 6: the same new contact
            ["Zed", "", "", "p1"],  # 7: missing_key
            ["Yan", "not-an-email", "", ""],  # 8: invalid_email, invalid under the key
        ],
    )


async def _contacts(dsn: str, client: int) -> list[tuple[object, ...]]:
    rows = await fetch(
        dsn,
        "SELECT c.cpf_cnpj, c.name,"
        " (SELECT array_agg(d.channel_id || ':' || d.value ORDER BY d.channel_id, d.value)"
        "  FROM contact_details d WHERE d.contact_id = c.id AND d.deleted_at IS NULL) AS details,"
        " (SELECT array_agg(v.value ORDER BY v.value) FROM contact_custom_fields v"
        "  WHERE v.contact_id = c.id) AS customs"
        " FROM contact c WHERE c.client_id = $1 AND c.deleted_at IS NULL"
        " ORDER BY c.cpf_cnpj NULLS LAST, c.name",
        client,
    )
    return [tuple(r) for r in rows]


@pytest.mark.parametrize(("chunk_size", "concurrency"), [(1, 2), (500, 2), (1, 4)])
def test_an_email_keyed_import_matches_merges_and_refuses_by_the_key(
    db_dsn: str, tmp_path: Path, chunk_size: int, concurrency: int
) -> None:
    """In four partitions d@ and c@ hash apart: their rows go by contact 3's group, in line
    order (line 4's name wins)."""

    async def run() -> None:
        client = 61_000 + chunk_size + 10 * concurrency
        await import_file(db_dsn, _preload(tmp_path), client)
        outcome = await import_file(
            db_dsn,
            _body(tmp_path),
            client,
            chunk_size=chunk_size,
            concurrency=concurrency,
            layout_document=EMAIL,
        )
        c = outcome.counters
        assert (c.rows_read, c.inserted, c.updated, c.invalid) == (7, 1, 3, 3)
        issues = await fetch(
            db_dsn,
            "SELECT line, column_name, reason FROM import_row_error WHERE job_id = $1"
            " ORDER BY line",
            outcome.job_id,
        )
        assert [tuple(r) for r in issues] == [
            (2, "email", "ambiguous_key"),
            (7, "email", "missing_key"),
            (8, "email", "invalid_email"),
        ]
        assert await _contacts(db_dsn, client) == [
            (cpf(1), "Ana", ["3:a@x.com"], ["p1"]),
            (cpf(2), "Bia", ["3:a@x.com"], None),
            (cpf(3), "Caio D", ["1:+5511912345678", "3:c@x.com", "3:d@x.com"], ["p3"]),
            (None, "Eva E", ["3:e@x.com"], ["p9"]),
        ]

    asyncio.run(run())


def test_a_run_keeps_its_key_groups_as_long_as_its_ledger(db_dsn: str, tmp_path: Path) -> None:
    """The groups are read by the job's first run and kept with it: a run that resumes from its
    ledger cuts by the kept ones, even after another writer gave a contact a second e-mail (its
    rows would otherwise move between partitions under a half-done chunk); remove-data, which
    clears the ledger, clears them too."""

    async def run() -> None:
        client = 61_900
        await import_file(db_dsn, _preload(tmp_path), client)
        outcome = await import_file(
            db_dsn, _body(tmp_path), client, concurrency=4, layout_document=EMAIL
        )
        kept = await fetch(
            db_dsn,
            "SELECT whole, key_values, canonicals FROM import_key_groups WHERE job_id = $1",
            outcome.job_id,
        )
        assert [tuple(r) for r in kept] == [(False, ["d@x.com"], ["c@x.com"])]
        await fetch(  # another writer: Eva's contact gets a second e-mail
            db_dsn,
            "INSERT INTO contact_details (contact_id, client_id, channel_id, value)"
            " SELECT id, client_id, 3, 'a0@x.com' FROM contact"
            " WHERE client_id = $1 AND name = 'Eva E' RETURNING id",
            client,
        )
        pool = await connect_pool(db_dsn, 2)
        try:
            store = PostgresStore(pool)
            job = await store.get_job(outcome.job_id)
            assert dict((await store.key_groups(job)).canonical) == {"d@x.com": "c@x.com"}
            one = await store.key_groups(replace(job, partitions=1))
            assert one is keys.NO_GROUPS
            async with pool.acquire() as conn:
                await conn.execute(queries()["clear_job_ledger"], job.id)
            fresh = await store.key_groups(job)
            assert dict(fresh.canonical) == {"d@x.com": "c@x.com", "e@x.com": "a0@x.com"}
        finally:
            await pool.close()

    asyncio.run(run())


def test_a_phone_keyed_import_finds_the_contact_by_its_normalized_number(
    db_dsn: str, tmp_path: Path
) -> None:
    async def run() -> None:
        client = 61_900
        pre = write_csv(
            tmp_path / "p.csv", ["cpf", "nome", "celular"], [[cpf(5), "Lia", "11 91234-5678"]]
        )
        await import_file(db_dsn, pre, client)
        body = write_csv(
            tmp_path / "b.csv", ["nome", "telefone"], [["Lia Maria", "+55 (11) 91234-5678"]]
        )
        outcome = await import_file(db_dsn, body, client, layout_document={"key": "phone"})
        assert (outcome.counters.inserted, outcome.counters.updated) == (0, 1)
        assert await _contacts(db_dsn, client) == [
            (cpf(5), "Lia Maria", ["1:+5511912345678"], None)
        ]

    asyncio.run(run())


def test_the_threshold_counts_ambiguous_keys_and_fails_before_writing(
    db_dsn: str, tmp_path: Path
) -> None:
    async def run() -> None:
        client = 62_000
        await import_file(db_dsn, _preload(tmp_path), client)
        before = await tables_checksum(db_dsn)
        failed = await import_file(
            db_dsn, _body(tmp_path), client, layout_document=EMAIL, max_invalid="2"
        )
        assert (failed.status, failed.fail_reason) == (JobStatus.FAILED, "too_many_invalid_rows")
        assert await tables_checksum(db_dsn) == before
        reasons = await fetch(
            db_dsn,
            "SELECT reason FROM import_row_error WHERE job_id = $1 ORDER BY line",
            failed.job_id,
        )
        assert [r["reason"] for r in reasons] == ["ambiguous_key", "missing_key", "invalid_email"]
        passed = await import_file(
            db_dsn, _body(tmp_path), client, layout_document=EMAIL, max_invalid="3"
        )
        assert passed.status is JobStatus.COMPLETED
        assert passed.counters.invalid == 3

    asyncio.run(run())
