"""The compiled hot path against the pure reference, end to end on the real PostgreSQL.

The same hostile files (tests/hostile.py) go through `import_source` twice: with the pure
reference (``Settings(compiled=False)``, as ``IMPORTER_PURE=1`` runs) and with the compiled
path, for every chunk size and concurrency; the two must end with the same status, counters,
warnings, error report (line, column, reason, severity, value) and database state, byte for byte.
Caps are small so overlong fields and records happen.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.storage.files import LocalFileSource
from importer.core.models import ConflictStrategy, InputFormat, Limits
from importer.services.local import ImportRequest, import_source
from importer.settings import Settings
from tests.hostile import hostile_csv

pytestmark = pytest.mark.integration

CHUNK_SIZES = (1, 3, 500)
CONCURRENCIES = (1, 4)
LIMITS = Limits(max_record_chars=400, max_field_chars=80, max_value_chars=60)
_clients = itertools.count(70_000)


def _settings(compiled: bool) -> Settings:
    return Settings(limits=LIMITS, compiled=compiled)


async def _run(
    store: PostgresJobQueue,
    path: Path,
    client: int,
    strategy: ConflictStrategy,
    chunk_size: int,
    concurrency: int,
    compiled: bool,
) -> dict[str, Any]:
    request = ImportRequest(client, strategy, InputFormat.CSV, chunk_size, concurrency)
    outcome = await import_source(store, LocalFileSource(path), request, _settings(compiled))
    issues = [
        (i.line, i.column, i.reason.value, i.severity.value, i.value)
        async for i in store.row_issues(outcome.job_id)
    ]
    return {
        "status": outcome.status,
        "counters": outcome.counters,
        "fail_reason": outcome.fail_reason,
        "warnings": outcome.warnings,
        "issues": sorted(issues, key=repr),
    }


async def _dump(dsn: str, client: int) -> dict[str, list[tuple[object, ...]]]:
    """Everything the client's imports wrote, without ids (they differ between clients)."""
    conn = await asyncpg.connect(dsn)
    try:
        queries = {
            "contacts": "SELECT cpf_cnpj, name, street_address, deleted_at IS NULL FROM contact"
            " WHERE client_id = $1",
            "details": "SELECT c.cpf_cnpj, d.channel_id, d.value, d.deleted_at IS NULL"
            " FROM contact_details d JOIN contact c ON c.id = d.contact_id WHERE c.client_id = $1",
            "fields": "SELECT name FROM custom_field WHERE client_id = $1",
            "values": "SELECT c.cpf_cnpj, f.name, v.value FROM contact_custom_fields v"
            " JOIN contact c ON c.id = v.contact_id JOIN custom_field f ON f.id = v.custom_field_id"
            " WHERE c.client_id = $1",
        }
        return {
            name: sorted((tuple(r) for r in await conn.fetch(sql, client)), key=repr)
            for name, sql in queries.items()
        }
    finally:
        await conn.close()


async def _both(dsn: str, tmp: Path, pre: bytes, body: bytes, strategy: ConflictStrategy) -> None:
    pre_path, body_path = tmp / "pre.csv", tmp / "body.csv"
    pre_path.write_bytes(pre)
    body_path.write_bytes(body)
    pool = await connect_pool(dsn, 6)
    try:
        store = PostgresJobQueue(pool)
        reference_client = next(_clients)
        await _run(store, pre_path, reference_client, ConflictStrategy.MERGE, 500, 1, False)
        expected = await _run(store, body_path, reference_client, strategy, 500, 1, False)
        expected_state = await _dump(dsn, reference_client)
        for chunk_size, concurrency in itertools.product(CHUNK_SIZES, CONCURRENCIES):
            where = f"chunk_size={chunk_size} concurrency={concurrency}"
            client = next(_clients)
            await _run(store, pre_path, client, ConflictStrategy.MERGE, 500, 1, True)
            got = await _run(store, body_path, client, strategy, chunk_size, concurrency, True)
            assert got == expected, where
            assert await _dump(dsn, client) == expected_state, where
    finally:
        await pool.close()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    pre=hostile_csv(max_rows=6),
    body=hostile_csv(),
    strategy=st.sampled_from([ConflictStrategy.MERGE, ConflictStrategy.DISCARD]),
)
def test_compiled_equals_pure_on_hostile_files(
    db_dsn: str,
    tmp_path: Path,
    pre: bytes,
    body: bytes,
    strategy: ConflictStrategy,
) -> None:
    asyncio.run(_both(db_dsn, tmp_path, pre, body, strategy))
