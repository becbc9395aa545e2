"""The undo journal's batch rows (issue 15): one ``import_journal`` row per batch; two batches
of one import changing one stored contact are undone newest first, back to the first
before-image; and the journal of the four tables before it, converted by the migration, still
undoes its import byte for byte."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import asyncpg
import pytest

from importer.adapters.postgres.pool import connect_pool, migrate
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.postgres.undo import PostgresUndo
from importer.services.undo import undo_import
from importer.sql import queries
from tests.support import fetch, import_file, live_checksum

pytestmark = pytest.mark.integration

_clients = itertools.count(71_000)
_HEADER = "nome,cpf,email,plano,endereco\n"
PRE = ["Ana,52998224725,ana@x.com,p1,Rua A", "Bia,11144477735,,,"]
# Chunks of one row: each its own batch, in one key partition for each key, in file order.
BODY = [
    "Ana 2,52998224725,ana2@x.com,p2,",
    "Caio,39053344705,c@x.com,p9,Rua C",
    "Ana 3,52998224725,ana3@x.com,p3,Rua A3",
    "Bia 2,11144477735,bia@x.com,b1,",
    "Bia 3,11144477735,,b2,Rua B",
]


def _file(tmp: Path, name: str, lines: list[str]) -> Path:
    path = tmp / name
    path.write_text(_HEADER + "\n".join(lines) + "\n", encoding="utf-8")
    return path


async def _undo(dsn: str, job_id: object, client: int) -> None:
    pool = await connect_pool(dsn, 4)
    try:
        await undo_import(PostgresUndo(pool), PostgresJobQueue(pool), client, job_id)  # type: ignore[arg-type]
    finally:
        await pool.close()


async def _imported(dsn: str, tmp: Path) -> tuple[int, object, dict[str, str]]:
    """A client with PRE, then BODY imported one row per batch: (client, job, state before)."""
    client = next(_clients)
    await import_file(dsn, _file(tmp, "pre.csv", PRE), client)
    before = await live_checksum(dsn, client)
    outcome = await import_file(dsn, _file(tmp, "body.csv", BODY), client, chunk_size=1)
    return client, outcome.job_id, before


def test_two_batches_changing_one_contact_undo_to_its_first_before_image(
    db_dsn: str, tmp_path: Path
) -> None:
    async def run() -> None:
        client, job_id, before = await _imported(db_dsn, tmp_path)
        rows = await fetch(
            db_dsn,
            "SELECT chunk_no, c.id = ANY(contact_ids) AS ana FROM import_journal,"
            " (SELECT id FROM contact WHERE client_id = $2 AND cpf_cnpj = '52998224725') c"
            " WHERE job_id = $1 ORDER BY chunk_no",
            job_id,
            client,
        )
        assert [r["chunk_no"] for r in rows] == [0, 1, 2, 3, 4]  # one row per batch
        assert [r["ana"] for r in rows] == [True, False, True, False, False]
        await _undo(db_dsn, job_id, client)
        assert await live_checksum(db_dsn, client) == before
        left = await fetch(
            db_dsn, "SELECT count(*) AS n FROM import_journal WHERE job_id = $1", job_id
        )
        assert left[0]["n"] == 0  # every row consumed

    asyncio.run(run())


# The journal's four tables before import_journal (schema.sql of issue 15's first version).
_OLD_TABLES = """
CREATE TABLE import_journal_contact (
    job_id uuid NOT NULL REFERENCES import_job (id) ON DELETE CASCADE,
    contact_id bigint NOT NULL, name text, street_address text,
    updated_at timestamptz NOT NULL, after_updated_at timestamptz NOT NULL,
    PRIMARY KEY (job_id, contact_id));
CREATE TABLE import_journal_custom (
    job_id uuid NOT NULL REFERENCES import_job (id) ON DELETE CASCADE,
    contact_id bigint NOT NULL, custom_field_id integer NOT NULL, before text,
    after text NOT NULL, PRIMARY KEY (job_id, contact_id, custom_field_id));
CREATE TABLE import_journal_detail (
    job_id uuid NOT NULL REFERENCES import_job (id) ON DELETE CASCADE,
    contact_id bigint NOT NULL, channel_id smallint NOT NULL, value text COLLATE "C" NOT NULL,
    PRIMARY KEY (job_id, contact_id, channel_id, value));
CREATE TABLE import_journal_created (
    job_id uuid NOT NULL REFERENCES import_job (id) ON DELETE CASCADE,
    chunk_no integer NOT NULL, partition integer NOT NULL, part integer NOT NULL,
    ids bigint[] NOT NULL, PRIMARY KEY (job_id, chunk_no, partition, part));
CREATE INDEX import_journal_contact_contact_idx ON import_journal_contact (contact_id);
"""

# import_journal's rows of job $1 written as the old tables had them: a contact's first
# before-image and last after-image, a custom value's first before and last after.
_TO_OLD = """
WITH b AS (SELECT * FROM import_journal WHERE job_id = $1),
created AS (
    INSERT INTO import_journal_created
    SELECT job_id, chunk_no, partition, part, created FROM b WHERE cardinality(created) > 0
),
contacts AS (
    INSERT INTO import_journal_contact
    SELECT DISTINCT ON (u.id) $1::uuid, u.id, u.name, u.street_address, u.updated_at,
           (SELECT max(x.after_at) FROM b x WHERE u.id = ANY(x.contact_ids))
    FROM b, unnest(contact_ids, names, street_addresses, updated_ats)
        AS u (id, name, street_address, updated_at)
    ORDER BY u.id, b.chunk_no, b.partition, b.part
),
customs AS (
    INSERT INTO import_journal_custom
    SELECT DISTINCT ON (u.c, u.f) $1::uuid, u.c, u.f, u.before,
           (SELECT y.a FROM b x, unnest(x.custom_contacts, x.custom_fields, x.custom_afters)
                AS y (c, f, a)
            WHERE y.c = u.c AND y.f = u.f ORDER BY x.chunk_no DESC, x.partition DESC LIMIT 1)
    FROM b, unnest(custom_contacts, custom_fields, custom_befores) AS u (c, f, before)
    ORDER BY u.c, u.f, b.chunk_no, b.partition, b.part
),
details AS (
    INSERT INTO import_journal_detail
    SELECT DISTINCT $1::uuid, u.c, u.ch, u.v
    FROM b, unnest(detail_contacts, detail_channels, detail_values) AS u (c, ch, v)
)
DELETE FROM import_journal WHERE job_id = $1
"""


def test_the_migration_converts_the_old_journal_tables_and_their_undo_still_restores(
    db_dsn: str, tmp_path: Path
) -> None:
    async def run() -> None:
        client, job_id, before = await _imported(db_dsn, tmp_path)
        conn = await asyncpg.connect(db_dsn)
        try:
            await conn.execute(_OLD_TABLES)
            await conn.execute(_TO_OLD, job_id)
            old = await conn.fetchval("SELECT count(*) FROM import_journal_contact")
            assert old == 2  # Ana's and Bia's first before-images
        finally:
            await conn.close()
        await migrate(db_dsn)
        await migrate(db_dsn)  # idempotent: the second finds no old table
        gone = await fetch(
            db_dsn,
            "SELECT count(*) AS n FROM pg_class WHERE relname = ANY($1::text[])",
            [f"import_journal_{t}" for t in ("contact", "custom", "detail", "created")],
        )
        assert gone[0]["n"] == 0
        rows = await fetch(
            db_dsn,
            "SELECT chunk_no, cardinality(created) AS created, cardinality(contact_ids) AS contacts"
            " FROM import_journal WHERE job_id = $1 ORDER BY chunk_no, partition, part",
            job_id,
        )
        assert sum(r["contacts"] for r in rows) == 2
        assert all(r["chunk_no"] < 0 for r in rows if r["contacts"])  # before the batches
        assert sum(r["created"] for r in rows) == 1  # Caio
        await _undo(db_dsn, job_id, client)
        assert await live_checksum(db_dsn, client) == before

    asyncio.run(run())


def test_the_undo_takes_the_batch_rows_in_reverse_apply_order_split_pieces_too(
    db_dsn: str, tmp_path: Path
) -> None:
    """Pieces of a split batch apply depth first (4, 5, then 3: part p's halves are 2p and
    2p + 1), chunks in order: the undo takes them back the other way round."""

    async def run() -> None:
        _, job_id, _ = await _imported(db_dsn, tmp_path)
        conn = await asyncpg.connect(db_dsn)
        try:
            await conn.execute("DELETE FROM import_journal WHERE job_id = $1", job_id)
            keys = [(0, 0, 1), (1, 0, 4), (1, 0, 5), (1, 0, 3), (1, 1, 2), (1, 1, 3), (2, 0, 1)]
            await conn.executemany(
                "INSERT INTO import_journal (job_id, chunk_no, partition, part, after_at)"
                " VALUES ($1, $2, $3, $4, now())",
                [(job_id, *key) for key in keys],
            )
            taken = []
            for _ in keys:
                left = {
                    tuple(r)
                    for r in await conn.fetch(
                        "SELECT chunk_no, partition, part FROM import_journal WHERE job_id = $1",
                        job_id,
                    )
                }
                assert (await conn.fetchrow(queries()["undo_batch"], job_id))["slices"] == 1
                now = await conn.fetch(
                    "SELECT chunk_no, partition, part FROM import_journal WHERE job_id = $1",
                    job_id,
                )
                (gone,) = left - {tuple(r) for r in now}
                taken.append(gone)
            assert taken == keys[::-1]
            assert (await conn.fetchrow(queries()["undo_batch"], job_id))["slices"] == 0
        finally:
            await conn.close()

    asyncio.run(run())
