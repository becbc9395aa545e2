"""Preview, then apply, and the error threshold, through the pipeline on the in-memory store.

A preview's counters are those of the import of the same file run after it, and it leaves the
contacts as they were; a file whose invalid rows exceed ``max_invalid`` fails before any
contact is written, with its whole error report, and one within it imports as if no threshold
were set (the batches come back from the spool, the file is read once).
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from dataclasses import asdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from importer.core import lifecycle, threshold
from importer.core.config import PipelineConfig
from importer.core.errors import (
    IllegalTransitionError,
    ImportAlreadyAppliedError,
    NotAPreviewError,
)
from importer.core.models import ConflictStrategy, Counters, JobStatus, Limits, NewJob, Reason
from importer.core.reference import InMemoryStore
from importer.pipeline.run import ImportRun
from importer.pipeline.spool import BatchSpool
from importer.read.blocks import BlockParser
from tests.hostile import hostile_csv
from tests.support import BytesSource

LIMITS = Limits(max_record_chars=400, max_field_chars=80, max_value_chars=60)
CONFIG = PipelineConfig(limits=LIMITS, read_block_bytes=97)


async def _run(
    store: InMemoryStore,
    data: bytes,
    strategy: ConflictStrategy,
    *,
    preview: bool = False,
    max_invalid: str | None = None,
    chunk_size: int = 3,
) -> uuid.UUID:
    job_id = uuid.uuid4()
    new_job = NewJob(
        job_id, 1, None, "b.csv", "csv", strategy.value, chunk_size, 2,
        preview=preview, max_invalid=max_invalid,
    )  # fmt: skip
    job = await store.create_job(new_job, JobStatus.QUEUED)
    await ImportRun(job, BytesSource("b.csv", data), store, CONFIG).run()
    return job_id


async def _apply(store: InMemoryStore, job_id: uuid.UUID, data: bytes) -> None:
    job = store.apply_preview(job_id)
    await ImportRun(job, BytesSource("b.csv", data), store, CONFIG).run()


def _snapshot(store: InMemoryStore) -> object:
    return copy.deepcopy(store.model.contacts), dict(store.custom_fields)


@settings(max_examples=60, deadline=None)
@given(
    pre=hostile_csv(max_rows=6),
    body=hostile_csv(),
    strategy=st.sampled_from(list(ConflictStrategy)),
    chunk_size=st.integers(1, 7),
)
def test_a_preview_counts_what_its_apply_does_and_writes_nothing(
    pre: bytes, body: bytes, strategy: ConflictStrategy, chunk_size: int
) -> None:
    async def check() -> None:
        store = InMemoryStore()
        await _run(store, pre, ConflictStrategy.MERGE)
        before = _snapshot(store)
        job_id = await _run(store, body, strategy, preview=True, chunk_size=chunk_size)
        assert _snapshot(store) == before  # the preview wrote no contact, no custom field
        job = store.jobs[job_id]
        if job.status is JobStatus.FAILED:  # the file is refused whole: its import fails too
            other = await _run(store, body, strategy)
            assert store.jobs[other].status is JobStatus.FAILED
            return
        assert job.status is JobStatus.READY
        assert job.awaiting_apply
        assert job.preview is not None
        await _apply(store, job_id, body)
        applied = store.jobs[job_id]
        assert applied.status in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_PLACEHOLDERS)
        assert job.preview["counters"] == asdict(applied.counters)

    asyncio.run(check())


@settings(max_examples=40, deadline=None)
@given(body=hostile_csv(), strategy=st.sampled_from(list(ConflictStrategy)))
def test_the_threshold_fails_past_the_invalid_rows_and_not_at_them(
    body: bytes, strategy: ConflictStrategy
) -> None:
    async def check() -> None:
        plain = InMemoryStore()
        plain_job = plain.jobs[await _run(plain, body, strategy)]
        if plain_job.status is JobStatus.FAILED:
            return  # refused whole: no threshold decides
        invalid = plain_job.counters.invalid

        at = InMemoryStore()
        at_job = at.jobs[await _run(at, body, strategy, max_invalid=str(invalid))]
        assert at_job.status is plain_job.status
        assert at_job.counters == plain_job.counters
        assert at.model.contacts == plain.model.contacts
        assert [i async for i in at.row_issues(at_job.id)] == [
            i async for i in plain.row_issues(plain_job.id)
        ]
        if invalid == 0:
            return
        below = InMemoryStore()
        job = below.jobs[await _run(below, body, strategy, max_invalid=str(invalid - 1))]
        assert job.status is JobStatus.FAILED
        assert job.fail_reason == Reason.TOO_MANY_INVALID_ROWS
        assert below.model.contacts == {}  # no contact written
        rows = plain_job.counters.rows_read
        assert job.counters == Counters(rows_read=rows, invalid=invalid, ignored=rows - invalid)
        assert len(below.issues[job.id]) == len(plain.issues[plain_job.id])  # the whole report

    asyncio.run(check())


def test_a_preview_past_its_threshold_fails_and_stages_nothing() -> None:
    body = b"nome,cpf\nA,52998224725\nB,123\nC,111\n"

    async def check() -> None:
        store = InMemoryStore()
        job_id = await _run(store, body, ConflictStrategy.MERGE, preview=True, max_invalid="1")
        job = store.jobs[job_id]
        assert job.status is JobStatus.FAILED
        assert job.fail_reason == "too_many_invalid_rows"
        assert job.counters == Counters(rows_read=3, invalid=2, ignored=1)
        assert store.staged.get(job_id, []) == []
        assert store.model.contacts == {}

    asyncio.run(check())


def test_the_spool_gives_back_the_batches_it_was_given() -> None:
    data = b"nome,cpf,email\nA,52998224725,a@x.com\nB,123,\nC,11144477735,c@\n" * 5
    job = asyncio.run(_job())
    parser = BlockParser(job, "b.csv", CONFIG)
    parser.push(data)
    batches = []
    while (pulled := parser.pull()) is not None:
        batches += pulled
    batches += parser.finish()
    spool = BatchSpool(job.id, LIMITS)
    try:
        spool.write(batches[:4])
        spool.write(batches[4:])
        spool.rewind()
        back = []
        while step := spool.read(3):
            back += step
    finally:
        spool.close()
    assert back == batches
    assert spool.batches == len(batches)


async def _job() -> object:
    store = InMemoryStore()
    return await store.create_job(
        NewJob(uuid.uuid4(), 1, None, "b.csv", "csv", "merge", 2, 2), JobStatus.NORMALIZING
    )


@pytest.mark.parametrize(
    ("text", "count", "points", "canonical"),
    [
        ("0", 0, None, "0"),
        ("100", 100, None, "100"),
        (" 7 ", 7, None, "7"),
        ("2%", None, 200, "2%"),
        ("0.5%", None, 50, "0.5%"),
        ("2.50%", None, 250, "2.5%"),
        ("0.05%", None, 5, "0.05%"),
        ("100%", None, 10_000, "100%"),
    ],
)
def test_thresholds_parse(text: str, count: int | None, points: int | None, canonical: str) -> None:
    limit = threshold.parse_max_invalid(text)
    assert (limit.count, limit.basis_points) == (count, points)
    assert str(limit) == canonical
    assert threshold.parse_max_invalid(str(limit)) == limit


@pytest.mark.parametrize("text", ["", "-1", "1.5", "2 %", "101%", "1.234%", "abc", "%", "1e3"])
def test_bad_thresholds_say_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="percentage"):
        threshold.parse_max_invalid(text)


def test_a_boolean_is_no_threshold() -> None:
    with pytest.raises(TypeError):
        threshold.parse_max_invalid(True)


@given(rows=st.integers(0, 10_000), invalid=st.integers(0, 10_000), points=st.integers(0, 10_000))
def test_a_percentage_is_exceeded_exactly_past_its_share(
    rows: int, invalid: int, points: int
) -> None:
    limit = threshold.MaxInvalid(basis_points=points)
    assert limit.exceeded(invalid, rows) == (invalid / max(rows, 1) > points / 10_000) or (
        invalid * 10_000 == rows * points  # float rounding at the boundary: exact says no
    )
    assert not limit.exceeded(rows * points // 10_000, rows)  # the largest share allowed


def test_two_percent_of_a_hundred() -> None:
    limit = threshold.parse_max_invalid("2%")
    assert not limit.exceeded(2, 100)
    assert limit.exceeded(3, 100)


@pytest.mark.parametrize("status", list(JobStatus))
def test_only_a_resting_preview_is_applied(status: JobStatus) -> None:
    assert (
        lifecycle.apply_action(status, preview_requested=True, awaiting_apply=True, expired=False)
        is lifecycle.ApplyAction.APPLY
    )
    assert (
        lifecycle.apply_action(status, preview_requested=True, awaiting_apply=True, expired=True)
        is lifecycle.ApplyAction.EXPIRE
    )
    with pytest.raises(NotAPreviewError):
        lifecycle.apply_action(status, preview_requested=False, awaiting_apply=False, expired=False)
    expected: type[Exception] = (
        IllegalTransitionError
        if status in (JobStatus.QUEUED, JobStatus.NORMALIZING)
        else ImportAlreadyAppliedError
    )
    with pytest.raises(expected):
        lifecycle.apply_action(status, preview_requested=True, awaiting_apply=False, expired=False)


def test_a_resting_preview_is_cancelled_at_once_and_never_requeued() -> None:
    assert not lifecycle.cancel_claimed(leased=True, in_process=True, awaiting_apply=True)
    assert lifecycle.cancel_claimed(leased=True, in_process=False, awaiting_apply=False)
    assert lifecycle.cancel_action(JobStatus.READY, claimed=False) is lifecycle.CancelAction.NOW
    refusal = lifecycle.requeue_refusal(
        JobStatus.READY, data_removed=False, lease_live=False, awaiting_apply=True
    )
    assert isinstance(refusal, IllegalTransitionError)
    assert "apply" in str(refusal)
