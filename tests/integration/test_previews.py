"""A preview on PostgreSQL: the file's valid rows staged, then planned against the stored
contacts — key by key by the pure builder (``plan``), and set-based by the database
(``tally``, the default policy's path), whose documents must be equal. Its counters are the
counters of the import of the same file run right after, and it writes nothing to the contact
tables (the client's state is the same before and after)."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from pathlib import Path

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.previews import PostgresPreviews
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.storage.files import LocalFileSource
from importer.core.config import PipelineConfig
from importer.core.errors import FileRejectedError, TransientStoreError
from importer.core.models import (
    Batch,
    ConflictStrategy,
    Counters,
    InputFormat,
    Job,
    JobStatus,
    Limits,
)
from importer.read.blocks import BlockParser
from importer.services.local import ImportRequest, import_source
from importer.settings import Settings
from tests.hostile import hostile_csv
from tests.support import cpf, db_state

pytestmark = pytest.mark.integration

LIMITS = Limits(max_record_chars=400, max_field_chars=80, max_value_chars=60)
_clients = itertools.count(90_000)


async def _preview(
    previews: PostgresPreviews,
    data: bytes,
    client: int,
    strategy: ConflictStrategy,
    partitions: int = 1,
) -> dict[str, object] | None:
    """The preview document, the builder's and the database's tally of it equal; None when the
    file is refused whole (the import fails too)."""
    job = Job(
        uuid.uuid4(), client, JobStatus.NORMALIZING, strategy, "b.csv", InputFormat.CSV, 3,
        partitions,
    )  # fmt: skip
    try:
        batches = _batches(job, data)
    except FileRejectedError:
        return None
    fields: set[str] = set()
    invalid = 0
    for batch in batches:
        await previews.stage_preview(job.id, batch.rows, batch.partition)
        invalid += batch.invalid
        fields |= {name for row in batch.rows for name, _ in row.custom_fields}
    builder = await previews.plan(job.id, client, strategy, sorted(fields))
    builder.add_invalid(invalid)
    tallied = await previews.tally(job.id, client, strategy, sorted(fields), partitions=partitions)
    tallied.add_invalid(invalid)
    await previews.clear_preview(job.id)
    document = builder.document(sorted(fields))
    assert tallied.document(sorted(fields)) == document
    return document


def _batches(job: Job, data: bytes) -> list[Batch]:
    parser = BlockParser(job, "b.csv", PipelineConfig(limits=LIMITS))
    parser.push(data)
    batches = []
    while (pulled := parser.pull()) is not None:
        batches += pulled
    return batches + parser.finish()


async def _check(
    dsn: str,
    tmp: Path,
    pre: bytes,
    body: bytes,
    strategy: ConflictStrategy,
    partitions: int = 1,
) -> None:
    pre_path, body_path = tmp / "pre.csv", tmp / "body.csv"
    pre_path.write_bytes(pre)
    body_path.write_bytes(body)
    pool = await connect_pool(dsn, 4)
    conn = await asyncpg.connect(dsn)
    try:
        store, previews = PostgresJobQueue(pool), PostgresPreviews(pool)
        client = next(_clients)
        run_settings = Settings(limits=LIMITS)
        pre_request = ImportRequest(client, ConflictStrategy.MERGE, InputFormat.CSV, 500, 1)
        await import_source(store, LocalFileSource(pre_path), pre_request, run_settings)
        before = await db_state(dsn, client)
        document = await _preview(previews, body, client, strategy, partitions)
        assert await db_state(dsn, client) == before  # a preview writes no contact row
        assert await conn.fetchval("SELECT count(*) FROM import_preview_row") == 0
        request = ImportRequest(client, strategy, InputFormat.CSV, 3, 2)
        outcome = await import_source(store, LocalFileSource(body_path), request, run_settings)
        if document is None:
            assert outcome.status is JobStatus.FAILED
        else:
            assert outcome.succeeded, outcome
            assert Counters(**document["counters"]) == outcome.counters  # type: ignore[arg-type]
    finally:
        await conn.close()
        await pool.close()


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pre=hostile_csv(max_rows=6),
    body=hostile_csv(),
    strategy=st.sampled_from([ConflictStrategy.MERGE, ConflictStrategy.DISCARD]),
    partitions=st.integers(1, 3),
)
def test_a_preview_counts_what_the_import_then_does(
    db_dsn: str,
    tmp_path: Path,
    pre: bytes,
    body: bytes,
    strategy: ConflictStrategy,
    partitions: int,
) -> None:
    """And the database's tally of it is the builder's document, whatever the partitions."""
    asyncio.run(_check(db_dsn, tmp_path, pre, body, strategy, partitions))


def _contacts_csv(rows: list[tuple[str, str, str, str]]) -> bytes:
    lines = ["cpf,nome,email,PLANO"] + [",".join(row) for row in rows]
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("strategy", [ConflictStrategy.MERGE, ConflictStrategy.DISCARD])
def test_the_tally_samples_the_first_keys_with_a_change(
    db_dsn: str, tmp_path: Path, strategy: ConflictStrategy
) -> None:
    """More keys than the sample holds, some stored as the file has them (no change: not
    sampled; under DISCARD no stored key changes), others repeated: the sample is the builder's,
    the first 20 keys with a change in key order, whatever the partitions."""
    keys = [cpf(i) for i in range(1, 61)]
    pre = _contacts_csv([(k, f"N{i}", f"u{i}@x.com", "Pro") for i, k in enumerate(keys[:45])])
    rows = [(k, f"N{i}", f"u{i}@x.com", "Pro") for i, k in enumerate(keys[:15])]  # unchanged
    rows += [(k, f"M{i}", "", "Pro" if i % 2 else "Max") for i, k in enumerate(keys[15:])]
    rows += [(k, "", f"v{i}@x.com", "") for i, k in enumerate(keys[10:30])]  # repeats
    body = _contacts_csv(rows)

    async def check() -> None:
        pool = await connect_pool(db_dsn, 4)
        try:
            store, previews = PostgresJobQueue(pool), PostgresPreviews(pool)
            (tmp_path / "pre.csv").write_bytes(pre)
            request = ImportRequest(1, ConflictStrategy.MERGE, InputFormat.CSV, 500, 1)
            await import_source(store, LocalFileSource(tmp_path / "pre.csv"), request, Settings())
            unchanged = set(keys[:10] if strategy is ConflictStrategy.MERGE else keys[:45])
            for partitions in (1, 3):
                document = await _preview(previews, body, 1, strategy, partitions)
                assert document is not None
                sample = document["sample"]
                assert isinstance(sample, list)
                sampled = [entry["key"] for entry in sample]
                assert sampled == sorted(sampled)
                assert not unchanged & set(sampled)
                assert len(sampled) == min(20, len(keys) - len(unchanged))
        finally:
            await pool.close()

    asyncio.run(check())


def test_a_failing_partition_fails_the_tally_with_the_stores_error(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One partition's statement failing cancels the others and raises the store's own error
    (translated once), not the task group's."""

    async def check() -> None:
        pool = await connect_pool(db_dsn, 4)
        try:
            previews = PostgresPreviews(pool)
            tally_part = previews._tally_part

            async def failing(*args: object) -> asyncpg.Record:
                if args[-1] == 1:
                    raise asyncpg.exceptions.SerializationError("one partition failed")
                return await tally_part(*args)  # type: ignore[arg-type]

            monkeypatch.setattr(previews, "_tally_part", failing)
            with pytest.raises(TransientStoreError, match="one partition failed"):
                await previews.tally(uuid.uuid4(), 1, ConflictStrategy.MERGE, [], partitions=3)
        finally:
            await pool.close()

    asyncio.run(check())
