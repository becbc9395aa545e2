"""Poison-row isolation: a batch the database refuses is split, in halves and in file order,
until the refused row stands alone; it alone is rejected, everything else lands, and a resumed
run finds the pieces already done (pure decisions, then the pipeline on an in-memory store)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from importer.core import lifecycle
from importer.core.config import PipelineConfig
from importer.core.errors import ContentRefusedError, StoreError, TransientStoreError
from importer.core.models import (
    Batch,
    ConflictStrategy,
    ContactRow,
    Counters,
    Job,
    JobStatus,
    Limits,
    NewJob,
    Reason,
    RowIssue,
    Severity,
)
from importer.core.reference import InMemoryStore, ReferenceModel
from importer.pipeline.run import ImportRun
from tests.support import BytesSource, cpf

CONFIG = PipelineConfig(limits=Limits(), read_block_bytes=256)
Action = lifecycle.FailureAction


def row(line: int, key: int = 0, name: str = "N") -> ContactRow:
    return ContactRow(line=line, cpf_cnpj=cpf(key), name=name, street_address=None)


def batch_of(keys: list[int], *, invalid: int = 0, part: int = 1) -> Batch:
    rows = tuple(row(10 + i, k) for i, k in enumerate(keys))
    issues = tuple(
        RowIssue(2 + i, "cpf", Reason.INVALID_CPF, "x", Severity.INVALID) for i in range(invalid)
    )
    return Batch(7, 2, 2, 999, rows, issues, invalid, part)


def leaves(batch: Batch) -> list[Batch]:
    """Split all the way down, depth first, halves in order (what a batch of poison rows does)."""
    if len(batch.rows) < 2:
        return [batch]
    first, second = lifecycle.split_batch(batch)
    return leaves(first) + leaves(second)


# --- the pure decisions -----------------------------------------------------------------------


@given(
    keys=st.lists(st.integers(0, 5), min_size=2, max_size=70),
    invalid=st.integers(0, 3),
    part=st.integers(1, 50),
)
def test_halves_keep_order_identity_and_record_issues_once(
    keys: list[int], invalid: int, part: int
) -> None:
    batch = batch_of(keys, invalid=invalid, part=part)
    first, second = lifecycle.split_batch(batch)
    assert first.rows + second.rows == batch.rows  # file order
    assert first.rows
    assert second.rows
    assert abs(len(first.rows) - len(second.rows)) <= 1
    assert (first.part, second.part) == (2 * part, 2 * part + 1)
    assert {(h.chunk_no, h.partition, h.end_offset) for h in (first, second)} == {(7, 2, 999)}
    assert (first.issues, first.invalid, second.issues, second.invalid) == (
        batch.issues,
        invalid,
        (),
        0,
    )
    assert first.rows_read + second.rows_read == batch.rows_read
    assert second.first_line == second.rows[0].line

    pieces = leaves(batch)
    assert tuple(r for p in pieces for r in p.rows) == batch.rows
    assert [i for p in pieces for i in p.issues] == list(batch.issues)
    assert sum(p.invalid for p in pieces) == invalid
    assert sum(p.rows_read for p in pieces) == batch.rows_read
    parts = [p.part for p in pieces]
    assert len(set(parts)) == len(parts)
    assert all(lifecycle.is_within(p, part) and p != part for p in parts)
    assert all(not lifecycle.is_within(a, b) for a in parts for b in parts if a != b)
    assert leaves(batch) == pieces  # the same on every run: a resumed run finds its pieces


def test_a_batch_under_two_rows_does_not_split() -> None:
    with pytest.raises(ValueError, match="two rows"):
        lifecycle.split_batch(batch_of([1]))


Kind = lifecycle.FailureKind


@pytest.mark.parametrize(
    ("rows", "attempt", "kind", "action"),
    [
        (5, 1, Kind.TRANSIENT, Action.RETRY),
        (5, 3, Kind.TRANSIENT, Action.RETRY),
        (5, 4, Kind.TRANSIENT, Action.DISCARD),  # attempts exhausted: discarded whole, as before
        (1, 4, Kind.TRANSIENT, Action.DISCARD),
        (5, 1, Kind.CONTENT, Action.SPLIT),  # the database refused the content
        (2, 1, Kind.CONTENT, Action.SPLIT),
        (1, 1, Kind.CONTENT, Action.REJECT),  # the poison row
        (0, 1, Kind.CONTENT, Action.DISCARD),  # issues only: nothing to split
        (5, 1, Kind.OTHER, Action.DISCARD),  # e.g. a permission: every row would fail alike
        (1, 1, Kind.OTHER, Action.DISCARD),
    ],
)
def test_failure_action(
    rows: int, attempt: int, kind: lifecycle.FailureKind, action: Action
) -> None:
    batch = batch_of(list(range(rows)))
    assert lifecycle.failure_action(batch, attempt, 4, kind) is action


def test_pieces_within_and_resume_splitting() -> None:
    assert lifecycle.is_within(1, 1)
    assert all(lifecycle.is_within(p, 1) for p in range(1, 64))
    assert lifecycle.is_within(11, 2)  # 11 → 5 → 2
    assert not lifecycle.is_within(11, 3)
    assert not lifecycle.is_within(2, 5)  # an ancestor is not within its piece
    assert not lifecycle.split_on_resume(1, ())
    assert not lifecycle.split_on_resume(2, {2})  # done itself: skipped, not split
    assert lifecycle.split_on_resume(1, {5})
    assert lifecycle.split_on_resume(2, {5})
    assert not lifecycle.split_on_resume(3, {5})
    assert lifecycle.done_parts({(0, 0, 1), (0, 1, 2), (0, 1, 7), (3, 0, 1)}) == {
        (0, 1): frozenset({2, 7})
    }


@given(
    keys=st.lists(st.integers(0, 6), min_size=2, max_size=40),
    stored=st.sets(st.integers(0, 6)),
    strategy=st.sampled_from(ConflictStrategy),
)
def test_a_key_in_both_halves_counts_as_unsplit(
    keys: list[int], stored: set[int], strategy: ConflictStrategy
) -> None:
    """The second half sees the first half's new keys as stored: updated (MERGE) or ignored
    (DISCARD), exactly as the unsplit batch counts them."""
    batch = batch_of(keys)
    whole = lifecycle.batch_counters(batch, strategy, len(set(keys) - stored))
    first, second = lifecycle.split_batch(batch)
    first_keys = {int(r.cpf_cnpj[:9]) for r in first.rows}
    second_keys = {int(r.cpf_cnpj[:9]) for r in second.rows}
    halves = lifecycle.sum_counters(
        (
            lifecycle.batch_counters(first, strategy, len(first_keys - stored)),
            lifecycle.batch_counters(second, strategy, len(second_keys - stored - first_keys)),
        )
    )
    assert halves == whole


# --- the pipeline on an in-memory store that refuses poison rows ------------------------------

POISON = "POISON"


class PoisonStore(InMemoryStore):
    """Refuses, as content, any batch holding a row named POISON; ``crash_after`` commits makes
    the run die (a process crash) on the next apply; the first ``failures`` applies fail."""

    def __init__(
        self, crash_after: int | None = None, failures: int = 0, transient: bool = True
    ) -> None:
        super().__init__()
        self.crash_after = crash_after
        self.failures = failures
        self.transient = transient
        self.commits = 0
        self.repeats = 0

    async def apply_batch(self, job: Job, batch: Batch, *, lane: bool = False) -> Counters | None:
        if self.failures:
            self.failures -= 1
            if self.transient:
                raise TransientStoreError("ConnectionDoesNotExistError: gone")
            raise StoreError("InsufficientPrivilegeError: permission denied")
        if self.crash_after is not None and self.commits >= self.crash_after:
            raise RuntimeError("the process died")
        if any(r.name == POISON for r in batch.rows):
            raise ContentRefusedError('CheckViolationError: violates check constraint "no_poison"')
        applied = await super().apply_batch(job, batch, lane=lane)
        if applied is None:
            self.repeats += 1
        self.commits += 1
        return applied


def csv_source(rows: list[tuple[int, bool]]) -> BytesSource:
    lines = ["nome,cpf"] + [
        f"{POISON if bad else f'N{i}'},{cpf(100 + k)}" for i, (k, bad) in enumerate(rows)
    ]
    return BytesSource("p.csv", ("\n".join(lines) + "\n").encode())


async def run_job(
    store: InMemoryStore,
    rows: list[tuple[int, bool]],
    strategy: ConflictStrategy,
    chunk_size: int,
    partitions: int,
    job_id: uuid.UUID | None = None,
) -> tuple[uuid.UUID, ImportRun]:
    if job_id is None:
        job_id = uuid.uuid4()
        new = NewJob(job_id, 1, None, "p.csv", "csv", strategy.value, chunk_size, partitions)
        await store.create_job(new, JobStatus.QUEUED)
    run = ImportRun(await store.get_job(job_id), csv_source(rows), store, CONFIG)
    await asyncio.wait_for(run.run(), 20)
    return job_id, run


def reference_without_poison(
    rows: list[tuple[int, bool]], strategy: ConflictStrategy
) -> tuple[ReferenceModel, Counters]:
    model = ReferenceModel()
    valid = [row(i + 2, 100 + k, f"N{i}") for i, (k, bad) in enumerate(rows) if not bad]
    return model, model.apply(1, valid, strategy)


file_rows = st.lists(st.tuples(st.integers(0, 8), st.booleans()), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(
    rows=file_rows,
    strategy=st.sampled_from(ConflictStrategy),
    chunk_size=st.integers(1, 25),
    partitions=st.integers(1, 3),
)
def test_only_poison_rows_are_rejected_and_the_rest_equals_the_reference(
    rows: list[tuple[int, bool]], strategy: ConflictStrategy, chunk_size: int, partitions: int
) -> None:
    store = PoisonStore()
    job_id, _ = asyncio.run(run_job(store, rows, strategy, chunk_size, partitions))
    model, expected = reference_without_poison(rows, strategy)
    totals = store.finalized[job_id].counters
    poison_lines = [i + 2 for i, (_, bad) in enumerate(rows) if bad]
    assert totals.balanced
    assert (totals.rows_read, totals.error, totals.invalid) == (len(rows), len(poison_lines), 0)
    assert (totals.inserted, totals.updated, totals.ignored) == (
        expected.inserted,
        expected.updated,
        expected.ignored,
    )
    assert store.model.client_state(1) == model.client_state(1)
    rejected = [i for i in store.issues[job_id] if i.reason is Reason.ROW_REJECTED]
    assert sorted(i.line for i in rejected) == poison_lines
    assert all(i.severity is Severity.ERROR and "no_poison" in (i.value or "") for i in rejected)
    assert store.repeats == 0


def test_transient_failures_still_retry_whole() -> None:
    store = PoisonStore(failures=2)
    rows = [(k, False) for k in range(10)]
    job_id, _ = asyncio.run(run_job(store, rows, ConflictStrategy.MERGE, 10, 1))
    assert set(store.ledger[job_id]) == {(0, 0, 1)}  # no split: one ledger row
    assert store.finalized[job_id].counters.inserted == 10


def test_other_store_errors_discard_the_batch_whole() -> None:
    store = PoisonStore(failures=1, transient=False)
    rows = [(k, False) for k in range(10)]
    job_id, _ = asyncio.run(run_job(store, rows, ConflictStrategy.MERGE, 10, 1))
    assert set(store.ledger[job_id]) == {(0, 0, 1)}
    assert store.finalized[job_id].counters == Counters(rows_read=10, error=10)
    assert {i.reason for i in store.issues[job_id]} == {Reason.CHUNK_DISCARDED}


@settings(max_examples=40, deadline=None)
@given(
    rows=file_rows.filter(lambda rs: any(bad for _, bad in rs)),
    strategy=st.sampled_from(ConflictStrategy),
    chunk_size=st.integers(2, 25),
    crash_after=st.integers(0, 12),
)
def test_a_crash_mid_split_resumes_without_applying_a_piece_twice(
    rows: list[tuple[int, bool]], strategy: ConflictStrategy, chunk_size: int, crash_after: int
) -> None:
    store = PoisonStore(crash_after=crash_after)
    try:
        job_id, _ = asyncio.run(run_job(store, rows, strategy, chunk_size, 1))
    except RuntimeError:
        job_id = next(iter(store.jobs))
    store.crash_after = None
    commits_before = set(store.ledger[job_id])
    if job_id not in store.finalized:
        asyncio.run(run_job(store, rows, strategy, chunk_size, 1, job_id))
    model, expected = reference_without_poison(rows, strategy)
    totals = store.finalized[job_id].counters
    assert totals.balanced
    assert (totals.inserted, totals.updated, totals.ignored) == (
        expected.inserted,
        expected.updated,
        expected.ignored,
    )
    assert store.model.client_state(1) == model.client_state(1)
    assert store.repeats == 0  # nothing already done was even tried again
    assert commits_before <= set(store.ledger[job_id])
    ledger = store.ledger[job_id]
    for chunk, partition, part in ledger:  # no piece overlaps another done piece
        others = [p for c, q, p in ledger if (c, q) == (chunk, partition) and p != part]
        assert not any(lifecycle.is_within(p, part) or lifecycle.is_within(part, p) for p in others)


def test_a_resumed_run_splits_the_same_way_and_skips_the_done_pieces() -> None:
    rows = [(k, k == 5) for k in range(8)]  # one chunk of 8 rows, the poison on line 7
    store = PoisonStore(crash_after=1)  # the first piece commits, then the process dies
    with pytest.raises(RuntimeError):
        asyncio.run(run_job(store, rows, ConflictStrategy.MERGE, 8, 1))
    job_id = next(iter(store.jobs))
    assert set(store.ledger[job_id]) == {(0, 0, 2)}  # rows 0-3, split from the whole
    store.crash_after = None
    asyncio.run(run_job(store, rows, ConflictStrategy.MERGE, 8, 1, job_id))
    # 3 (rows 4-7) → 6 (rows 4-5) → 12 (row 4), 13 (the poison row); 7 (rows 6-7)
    assert set(store.ledger[job_id]) == {(0, 0, p) for p in (2, 12, 13, 7)}
    assert store.ledger[job_id][(0, 0, 13)] == Counters(rows_read=1, error=1)
    assert store.repeats == 0
    assert store.finalized[job_id].counters == Counters(rows_read=8, inserted=7, error=1)
