"""The duplicate report through the pipeline on the in-memory store: for any file, chunk size
and number of partitions, each report row's winner is the contact's final value; with the
report off, nothing is kept."""

from __future__ import annotations

import asyncio
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from importer.core.models import ConflictStrategy, JobStatus, NewJob
from importer.core.reference import InMemoryStore
from importer.pipeline.run import ImportRun
from tests.strategies import csv_bytes, rows
from tests.support import BytesSource
from tests.unit.test_preview_run import CONFIG


async def _run(
    store: InMemoryStore,
    data: bytes,
    strategy: ConflictStrategy,
    chunk_size: int,
    partitions: int,
    *,
    report: bool = True,
) -> uuid.UUID:
    new_job = NewJob(
        uuid.uuid4(), 1, None, "b.csv", "csv", strategy.value, chunk_size, partitions,
        duplicates_report=report,
    )  # fmt: skip
    job = await store.create_job(new_job, JobStatus.QUEUED)
    await ImportRun(job, BytesSource("b.csv", data), store, CONFIG).run()
    return job.id


@settings(max_examples=60, deadline=None)
@given(
    pre=st.lists(rows(key_count=4), max_size=5),
    body=st.lists(rows(key_count=4), min_size=1, max_size=20),
    strategy=st.sampled_from(list(ConflictStrategy)),
    chunk_size=st.integers(1, 6),
    partitions=st.integers(1, 3),
)
def test_the_reports_winners_are_the_final_values(
    pre: list, body: list, strategy: ConflictStrategy, chunk_size: int, partitions: int
) -> None:
    async def check() -> None:
        store = InMemoryStore()
        await _run(store, csv_bytes(pre), ConflictStrategy.MERGE, 5, 1)
        job_id = await _run(store, csv_bytes(body), strategy, chunk_size, partitions)
        final = store.model.client_state(1)
        for row in [r async for r in store.duplicates(job_id)]:
            state = final[row.key]
            if row.field == "name":
                assert row.winner_value == state.name
            else:
                assert row.winner_value == state.custom_fields.get(row.field[7:].lower())
            assert row.losing_lines or row.loser_stored
        off = InMemoryStore()
        off_id = await _run(off, csv_bytes(body), strategy, chunk_size, partitions, report=False)
        assert [r async for r in off.duplicates(off_id)] == []

    asyncio.run(check())
