"""Property: random files give the reference model's state and counters, for every chunk size
and concurrency, on the real PostgreSQL, with any merge policy of the layout."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.storage.files import LocalFileSource
from importer.core.layout import parse_layout
from importer.core.models import Channel, ConflictStrategy, Counters
from importer.core.reference import ReferenceModel
from importer.services.local import ImportRequest, import_source
from importer.services.runs import format_for
from importer.settings import Settings
from tests.strategies import (
    EMAIL_LAYOUT,
    GeneratedRow,
    csv_bytes,
    email_csv_bytes,
    email_rows,
    expected_rows,
    keyed_merge_documents,
    merge_documents,
    rows,
)
from tests.support import db_contacts, db_state, model_contacts

pytestmark = pytest.mark.integration

CHUNK_SIZES = (1, 3, 500)
CONCURRENCIES = (1, 4)
_clients = itertools.count(50_000)


async def _import(
    store: PostgresJobQueue,
    path: Path,
    client: int,
    strategy: ConflictStrategy,
    chunk_size: int,
    concurrency: int,
    layout: dict[str, object] | None = None,
) -> Counters:
    request = ImportRequest(
        client,
        strategy,
        format_for(path.name),
        chunk_size,
        concurrency,
        layout=None if layout is None else parse_layout(layout),
        layout_document=layout,
    )
    outcome = await import_source(store, LocalFileSource(path), request, Settings())
    assert outcome.counters.balanced
    return outcome.counters


async def _check(
    dsn: str,
    tmp: Path,
    pre: list[GeneratedRow],
    body: list[GeneratedRow],
    strategy: ConflictStrategy,
    layout: dict[str, object] | None = None,
) -> None:
    policy = parse_layout(layout or {}).merge
    pre_path, body_path = tmp / "pre.csv", tmp / "body.csv"
    pre_path.write_bytes(csv_bytes(pre))
    body_path.write_bytes(csv_bytes(body))
    pre_rows, _ = expected_rows(pre)
    body_rows, invalid = expected_rows(body)
    pool = await connect_pool(dsn, 6)
    try:
        store = PostgresJobQueue(pool)
        for chunk_size, concurrency in itertools.product(CHUNK_SIZES, CONCURRENCIES):
            client = next(_clients)
            model = ReferenceModel()
            model.apply(client, pre_rows, ConflictStrategy.MERGE)
            expected = model.apply(client, body_rows, strategy, policy)
            await _import(store, pre_path, client, ConflictStrategy.MERGE, 500, 1)
            got = await _import(store, body_path, client, strategy, chunk_size, concurrency, layout)
            where = f"chunk_size={chunk_size} concurrency={concurrency}"
            assert got.invalid == invalid, where
            assert (got.inserted, got.updated, got.ignored, got.error) == (
                expected.inserted,
                expected.updated,
                expected.ignored,
                0,
            ), where
            assert await db_state(dsn, client) == model.client_state(client), where
    finally:
        await pool.close()


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pre=st.lists(rows(), max_size=6).map(lambda rs: [r for r in rs if r.expected is not None]),
    body=st.lists(rows(), min_size=1, max_size=25),
    strategy=st.sampled_from(ConflictStrategy),
)
def test_random_files_match_the_reference_model(
    db_dsn: str,
    tmp_path: Path,
    pre: list[GeneratedRow],
    body: list[GeneratedRow],
    strategy: ConflictStrategy,
) -> None:
    asyncio.run(_check(db_dsn, tmp_path, pre, body, strategy))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pre=st.lists(rows(key_count=3), min_size=2, max_size=4).map(
        lambda rs: [r for r in rs if r.expected is not None]
    ),
    body=st.lists(rows(key_count=3), min_size=2, max_size=16),
    document=merge_documents(),
)
def test_random_policies_match_the_reference_model(
    db_dsn: str,
    tmp_path: Path,
    pre: list[GeneratedRow],
    body: list[GeneratedRow],
    document: dict[str, str],
) -> None:
    """Few keys, many rows each, so the rules meet the import's own earlier batches (chunk
    sizes 1 and 3) and the stored contacts; the provenance lives in the database."""
    layout: dict[str, object] = {"merge": document}
    asyncio.run(_check(db_dsn, tmp_path, pre, body, ConflictStrategy.MERGE, layout))


async def _check_email_keyed(
    dsn: str,
    tmp: Path,
    pre: list[GeneratedRow],
    body: list[GeneratedRow],
    strategy: ConflictStrategy,
    document: dict[str, str],
) -> None:
    """:func:`_check` for a file keyed by e-mail (core.keys) over contacts preloaded by CPF:
    ambiguous keys are invalid, keys of one contact merge into it, new contacts have no CPF."""
    layout: dict[str, object] = {**EMAIL_LAYOUT, "merge": document}
    policy = parse_layout(layout).merge
    pre_path, body_path = tmp / "pre.csv", tmp / "body.csv"
    pre_path.write_bytes(csv_bytes(pre))
    body_path.write_bytes(email_csv_bytes(body))
    pre_rows, _ = expected_rows(pre)
    body_rows, invalid = expected_rows(body)
    pool = await connect_pool(dsn, 6)
    try:
        store = PostgresJobQueue(pool)
        for chunk_size in CHUNK_SIZES:
            client = next(_clients)
            model = ReferenceModel()
            model.apply(client, pre_rows, ConflictStrategy.MERGE)
            expected = model.apply(client, body_rows, strategy, policy, key_channel=Channel.EMAIL)
            await _import(store, pre_path, client, ConflictStrategy.MERGE, 500, 1)
            got = await _import(store, body_path, client, strategy, chunk_size, 4, layout)
            where = f"chunk_size={chunk_size}"
            assert got.invalid == invalid + expected.invalid, where
            assert (got.inserted, got.updated, got.ignored, got.error) == (
                expected.inserted,
                expected.updated,
                expected.ignored,
                0,
            ), where
            assert await db_contacts(dsn, client) == model_contacts(model.client_state(client))
    finally:
        await pool.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pre=st.lists(rows(key_count=4), min_size=2, max_size=6).map(
        lambda rs: [r for r in rs if r.expected is not None]
    ),
    body=st.lists(email_rows(), min_size=1, max_size=16),
    strategy=st.sampled_from(ConflictStrategy),
    document=keyed_merge_documents(),
)
def test_random_email_keyed_files_match_the_reference_model(
    db_dsn: str,
    tmp_path: Path,
    pre: list[GeneratedRow],
    body: list[GeneratedRow],
    strategy: ConflictStrategy,
    document: dict[str, str],
) -> None:
    asyncio.run(_check_email_keyed(db_dsn, tmp_path, pre, body, strategy, document))
