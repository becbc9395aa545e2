"""Status transitions, batch counters and retry routing (pure, exhaustive)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from importer import lifecycle
from importer.models import (
    TERMINAL_STATUSES,
    Batch,
    ConflictStrategy,
    ContactRow,
    JobStatus,
)


@pytest.mark.parametrize("current", list(JobStatus))
@pytest.mark.parametrize("target", list(JobStatus))
def test_transitions_follow_the_state_machine(current: JobStatus, target: JobStatus) -> None:
    allowed = lifecycle.can_transition(current, target)
    if current in TERMINAL_STATUSES:
        assert not allowed  # a terminal job never moves again
    if target in (JobStatus.FAILED, JobStatus.CANCELLED):
        assert allowed == (current not in TERMINAL_STATUSES)
    if target is JobStatus.IMPORTING:
        assert allowed == (current in (JobStatus.NORMALIZING, JobStatus.READY))


def test_requeue_of_a_queued_job_is_allowed_and_importing_is_one_way() -> None:
    assert lifecycle.can_transition(JobStatus.QUEUED, JobStatus.QUEUED)
    assert not lifecycle.can_transition(JobStatus.IMPORTING, JobStatus.QUEUED)
    assert lifecycle.allowed_sources(JobStatus.QUEUED) == ["queued", "uploaded"]


@given(
    valid=st.integers(0, 50),
    invalid=st.integers(0, 50),
    data=st.data(),
    strategy=st.sampled_from(ConflictStrategy),
)
def test_batch_counters_balance(
    valid: int, invalid: int, data: st.DataObject, strategy: ConflictStrategy
) -> None:
    rows = tuple(ContactRow(i, str(i), None, None) for i in range(valid))
    batch = Batch(0, 0, 1, 0, rows, (), invalid)
    new_keys = data.draw(st.integers(0, valid))
    counters = lifecycle.batch_counters(batch, strategy, new_keys)
    assert counters.balanced
    assert counters.rows_read == valid + invalid
    assert lifecycle.discarded_counters(batch).balanced
    assert lifecycle.discarded_counters(batch).error == valid


def test_retry_routing() -> None:
    assert lifecycle.should_retry(1, 4, transient=True)
    assert not lifecycle.should_retry(4, 4, transient=True)
    assert not lifecycle.should_retry(1, 4, transient=False)
    assert lifecycle.retry_delay(1) < lifecycle.retry_delay(2) <= 5.0
    assert lifecycle.retry_delay(30) == 5.0


def test_analyze_threshold_doubles_up_to_a_step() -> None:
    steps = [lifecycle.FIRST_ANALYZE_AFTER]
    for _ in range(12):
        steps.append(lifecycle.next_analyze_threshold(steps[-1]))
    assert steps[1] == 2 * steps[0]
    assert steps[-1] == steps[-2] == 2_000_000
