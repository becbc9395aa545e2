"""Status transitions, batch counters and retry routing (pure, exhaustive)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from importer.core import lifecycle
from importer.core.errors import IllegalTransitionError, ImportAlreadyAppliedError, JobNotReadyError
from importer.core.models import TERMINAL_STATUSES, Batch, ConflictStrategy, ContactRow, JobStatus


@pytest.mark.parametrize("current", list(JobStatus))
@pytest.mark.parametrize("target", list(JobStatus))
def test_transitions_follow_the_state_machine(current: JobStatus, target: JobStatus) -> None:
    allowed = lifecycle.can_transition(current, target)
    if current in TERMINAL_STATUSES:
        assert not allowed  # a terminal job never moves again
    if target in (JobStatus.FAILED, JobStatus.CANCELLED):  # an undo runs to its end
        assert allowed == (current not in TERMINAL_STATUSES | {JobStatus.UNDOING})
    if target is JobStatus.IMPORTING:
        assert allowed == (current in lifecycle.RUNNING_STATUSES)  # a resumed run re-enters
    if current is target:  # staying put: a repeated start, or a resumed run
        assert allowed == (current in {JobStatus.QUEUED} | lifecycle.RUNNING_STATUSES)


def test_requeue_of_a_queued_job_is_allowed_and_importing_is_one_way() -> None:
    assert lifecycle.can_transition(JobStatus.QUEUED, JobStatus.QUEUED)
    assert not lifecycle.can_transition(JobStatus.IMPORTING, JobStatus.QUEUED)
    assert not lifecycle.can_transition(JobStatus.IMPORTING, JobStatus.NORMALIZING)
    assert lifecycle.allowed_sources(JobStatus.QUEUED) == ["queued", "uploaded"]


@pytest.mark.parametrize("current", sorted(lifecycle.CLAIMABLE_STATUSES))
def test_a_claimed_job_enters_a_status_it_may_reach(current: JobStatus) -> None:
    entry = lifecycle.entry_status(current)
    assert lifecycle.can_transition(current, entry)
    assert entry in lifecycle.RUNNING_STATUSES
    assert lifecycle.can_transition(entry, JobStatus.IMPORTING)
    if current in (JobStatus.QUEUED, JobStatus.NORMALIZING):
        assert entry is JobStatus.NORMALIZING
    else:  # never backwards: a resumed run stays where its predecessor stopped
        assert entry is current


@pytest.mark.parametrize("current", list(JobStatus))
def test_start_refusals(current: JobStatus) -> None:
    refusal = lifecycle.start_refusal(current)
    if current in (JobStatus.UPLOADED, JobStatus.QUEUED):
        assert refusal is None
    elif current is JobStatus.UPLOADING:
        assert isinstance(refusal, JobNotReadyError)
    else:  # running or terminal: the one-time gate
        assert isinstance(refusal, ImportAlreadyAppliedError)
        assert (
            str(refusal)
            == "The import has already started or finished: it cannot be applied again."
        )
    assert (refusal is None) == lifecycle.can_transition(current, JobStatus.QUEUED)


@pytest.mark.parametrize("current", list(JobStatus))
@pytest.mark.parametrize("claimed", [False, True])
def test_cancel_actions(current: JobStatus, claimed: bool) -> None:
    action = lifecycle.cancel_action(current, claimed)
    if current in TERMINAL_STATUSES | {JobStatus.UNDOING}:
        assert action is lifecycle.CancelAction.NOTHING
    elif claimed or current in lifecycle.RUNNING_STATUSES - {JobStatus.READY}:
        assert action is lifecycle.CancelAction.REQUEST  # a worker holds (or held) it
    else:
        assert action is lifecycle.CancelAction.NOW
    if action is lifecycle.CancelAction.NOW:
        assert lifecycle.can_transition(current, JobStatus.CANCELLED)


@pytest.mark.parametrize("current", list(JobStatus))
@pytest.mark.parametrize("ok", [True, False])
def test_upload_confirmation(current: JobStatus, ok: bool) -> None:
    target = JobStatus.UPLOADED if ok else JobStatus.FAILED
    if current is JobStatus.UPLOADING:
        assert lifecycle.upload_target(current, ok) is target
        assert lifecycle.can_transition(current, target)
    elif current is target:
        assert lifecycle.upload_target(current, ok) is None  # a repeat changes nothing
    else:
        with pytest.raises(IllegalTransitionError):
            lifecycle.upload_target(current, ok)


def test_final_status() -> None:
    assert lifecycle.final_status(None, cancelled=False) is JobStatus.COMPLETED
    assert lifecycle.final_status("empty_file", cancelled=False) is JobStatus.FAILED
    assert lifecycle.final_status(None, cancelled=True) is JobStatus.CANCELLED
    assert lifecycle.final_status("x", cancelled=True) is JobStatus.CANCELLED


@given(
    finished=st.booleans(),
    lease_lost=st.booleans(),
    cancel_requested=st.booleans(),
    interrupted=st.booleans(),
)
def test_run_endings(
    finished: bool, lease_lost: bool, cancel_requested: bool, interrupted: bool
) -> None:
    ending = lifecycle.run_ending(
        finished=finished,
        lease_lost=lease_lost,
        cancel_requested=cancel_requested,
        interrupted=interrupted,
    )
    if finished:
        assert ending is lifecycle.RunEnding.FINISHED
    elif lease_lost:  # never write for a job another worker owns
        assert ending is lifecycle.RunEnding.LEASE_LOST
    elif cancel_requested:
        assert ending is lifecycle.RunEnding.CANCELLED
    elif interrupted:  # not released: no reclaim loop while a service is away
        assert ending is lifecycle.RunEnding.INTERRUPTED
    else:
        assert ending is lifecycle.RunEnding.RELEASED


def test_heartbeat_beats_three_times_per_lease() -> None:
    assert lifecycle.heartbeat_interval(30.0) == lifecycle.HEARTBEAT_MAX_S  # cancels stay prompt
    assert lifecycle.heartbeat_interval(3.0) == 1.0  # a short lease: three renewals per lease


def test_status_sets() -> None:
    assert lifecycle.RUNNING_STATUSES | {JobStatus.QUEUED} == lifecycle.CLAIMABLE_STATUSES
    assert not lifecycle.CLAIMABLE_STATUSES & TERMINAL_STATUSES
    assert lifecycle.values([JobStatus.QUEUED, JobStatus.IMPORTING]) == ["importing", "queued"]


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


@pytest.mark.parametrize("current", list(JobStatus))
@pytest.mark.parametrize(("journaled", "removed", "expired"), [
    (True, False, False), (False, False, False), (True, True, False), (True, False, True),
])  # fmt: skip
def test_undo_actions(current: JobStatus, journaled: bool, removed: bool, expired: bool) -> None:
    """An ended import with its journal, its data and within its retention is undone (an undo
    under way resumes whatever); an undone one changes nothing; the rest are refused."""
    from importer.core.errors import RetentionExpiredError

    def action() -> lifecycle.UndoAction:
        return lifecycle.undo_action(
            current, journaled=journaled, data_removed=removed, expired=expired
        )

    if current is JobStatus.UNDONE:
        assert action() is lifecycle.UndoAction.NOTHING
    elif current not in lifecycle.UNDO_SOURCES:
        with pytest.raises(IllegalTransitionError):
            action()
    elif expired and current is not JobStatus.UNDOING:
        with pytest.raises(RetentionExpiredError):
            action()
    elif not journaled or removed:
        with pytest.raises(IllegalTransitionError):
            action()
    else:
        assert action() is lifecycle.UndoAction.RUN
