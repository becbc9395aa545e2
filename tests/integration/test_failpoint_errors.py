"""The `error` failpoint takes a dropped connection's path: the batch's transaction rolls back,
the batch is retried, and the import ends as an undisturbed one does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from importer.core import failpoints
from tests.jobs_support import as_tuple, contacts_csv, ledger_chunks
from tests.support import db_state, finalization_counts, import_file

pytestmark = pytest.mark.integration


@pytest.fixture
def injected_errors() -> Iterator[None]:
    failpoints.configure("after_copy_before_commit=error@2,before_finalize=sleep:1")
    try:
        yield
    finally:
        failpoints.configure("")


@pytest.mark.usefixtures("injected_errors")
async def test_an_injected_error_inside_a_batch_is_retried_without_a_trace(
    db_dsn: str, tmp_path: Path
) -> None:
    path = contacts_csv(tmp_path / "c.csv", 60)
    disturbed = await import_file(db_dsn, path, 41, chunk_size=10, concurrency=2)
    assert failpoints.armed is not None
    assert failpoints.armed.hits("after_copy_before_commit") == 12 + 1  # one batch twice
    assert failpoints.armed.hits("before_finalize") == 1
    failpoints.configure("")
    undisturbed = await import_file(db_dsn, path, 42, chunk_size=10, concurrency=2)
    assert as_tuple(disturbed.counters) == as_tuple(undisturbed.counters)
    assert await db_state(db_dsn, 41) == await db_state(db_dsn, 42)
    assert await ledger_chunks(db_dsn, disturbed.job_id) == 12  # the failed try left no row
    assert await finalization_counts(db_dsn, disturbed.job_id) == (1, 1)
