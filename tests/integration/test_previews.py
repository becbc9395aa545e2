"""A preview on PostgreSQL: the file's valid rows staged, then planned key by key against the
stored contacts. Its counters are the counters of the import of the same file run right after,
and it writes nothing to the contact tables (the client's state is the same before and after)."""

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
from importer.core.errors import FileRejectedError
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
from tests.support import db_state

pytestmark = pytest.mark.integration

LIMITS = Limits(max_record_chars=400, max_field_chars=80, max_value_chars=60)
_clients = itertools.count(90_000)


async def _preview(
    previews: PostgresPreviews, data: bytes, client: int, strategy: ConflictStrategy
) -> dict[str, object] | None:
    """The preview document; None when the file is refused whole (the import fails too)."""
    job = Job(uuid.uuid4(), client, JobStatus.NORMALIZING, strategy, "b.csv", InputFormat.CSV, 3, 2)
    try:
        batches = _batches(job, data)
    except FileRejectedError:
        return None
    fields: set[str] = set()
    invalid = 0
    for batch in batches:
        await previews.stage_preview(job.id, batch.rows)
        invalid += batch.invalid
        fields |= {name for row in batch.rows for name, _ in row.custom_fields}
    builder = await previews.plan(job.id, client, strategy, sorted(fields))
    builder.add_invalid(invalid)
    await previews.clear_preview(job.id)
    return builder.document(sorted(fields))


def _batches(job: Job, data: bytes) -> list[Batch]:
    parser = BlockParser(job, "b.csv", PipelineConfig(limits=LIMITS))
    parser.push(data)
    batches = []
    while (pulled := parser.pull()) is not None:
        batches += pulled
    return batches + parser.finish()


async def _check(dsn: str, tmp: Path, pre: bytes, body: bytes, strategy: ConflictStrategy) -> None:
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
        document = await _preview(previews, body, client, strategy)
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
)
def test_a_preview_counts_what_the_import_then_does(
    db_dsn: str, tmp_path: Path, pre: bytes, body: bytes, strategy: ConflictStrategy
) -> None:
    asyncio.run(_check(db_dsn, tmp_path, pre, body, strategy))
