"""The owner's operations without services: requeue and removal rules, replay verdicts, and the
admin service's scoping over fakes of the store and the dead-letter queue."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence

import pytest

from importer.core import lifecycle
from importer.core.errors import (
    IllegalTransitionError,
    ImportAlreadyAppliedError,
    NoBrokerError,
    PermissionDeniedError,
)
from importer.core.models import TERMINAL_STATUSES, DeadLetter, JobStatus, RemovedData, Requeued
from importer.core.principals import Permission, Principal
from importer.services.admin import AdminService, Verdict, replay_verdict


@pytest.mark.parametrize("status", list(JobStatus))
@pytest.mark.parametrize("data_removed", [False, True])
@pytest.mark.parametrize("lease_live", [False, True])
@pytest.mark.parametrize("in_process", [False, True])
def test_requeue_refusal_for_every_status(
    status: JobStatus, data_removed: bool, lease_live: bool, in_process: bool
) -> None:
    """Requeue and `importer job resume` take the same jobs: ended ones (completed only once its
    data was removed) whatever their lease, and running ones whose lease expired (abandoned),
    or a command-line job's still queued (its process died waiting for its client's turn)."""
    refusal = lifecycle.requeue_refusal(
        status, data_removed=data_removed, lease_live=lease_live, in_process=in_process
    )
    if status in lifecycle.RUNNING_STATUSES or (in_process and status is JobStatus.QUEUED):
        assert (refusal is None) is not lease_live
        assert lease_live or "lease is live" not in str(refusal)
        assert status.value in lifecycle.requeue_sources(data_removed)
    elif status not in TERMINAL_STATUSES:
        assert isinstance(refusal, IllegalTransitionError)
    elif status in lifecycle.REQUEUE_SOURCES or data_removed:
        assert refusal is None
        assert status.value in lifecycle.requeue_sources(data_removed)
    else:
        assert isinstance(refusal, ImportAlreadyAppliedError)  # the one-time gate


def test_a_live_lease_is_refused_with_a_clear_message() -> None:
    refusal = lifecycle.requeue_refusal(JobStatus.IMPORTING, data_removed=False, lease_live=True)
    assert isinstance(refusal, IllegalTransitionError)
    assert "lease is live" in str(refusal)


def test_a_user_start_never_requeues_an_ended_job() -> None:
    for status in TERMINAL_STATUSES:
        assert not lifecycle.can_transition(status, JobStatus.QUEUED)
        assert lifecycle.start_refusal(status) is not None


@pytest.mark.parametrize("status", list(JobStatus))
def test_only_an_ended_import_s_data_is_removed(status: JobStatus) -> None:
    refusal = lifecycle.removal_refusal(status)
    assert (refusal is None) == (status in TERMINAL_STATUSES)


def letter(job_id: uuid.UUID | None, chunk: int = 0) -> DeadLetter:
    return DeadLetter(f"{job_id}:{chunk}:0", job_id, chunk, 0, "boom", 4, "2026-01-01T00:00:00")


def test_replay_verdicts() -> None:
    job = uuid.uuid4()
    assert replay_verdict(letter(None), None, None) is Verdict.MALFORMED
    assert replay_verdict(letter(job), None, None) is Verdict.UNKNOWN_IMPORT
    assert replay_verdict(letter(job), JobStatus.IMPORTING, uuid.uuid4()) is Verdict.NOT_ASKED
    assert replay_verdict(letter(job), JobStatus.IMPORTING, job) is Verdict.REPLAY
    for status in TERMINAL_STATUSES:
        assert replay_verdict(letter(job), status, None) is Verdict.JOB_ENDED


class FakeStore:
    def __init__(self, jobs: dict[uuid.UUID, tuple[int, JobStatus]]) -> None:
        self.jobs = jobs

    async def requeue_job(
        self, client_id: int | None, job_id: uuid.UUID, operation_id: str
    ) -> Requeued:
        raise NotImplementedError

    async def remove_job_data(self, client_id: int | None, job_id: uuid.UUID) -> RemovedData:
        raise NotImplementedError

    async def job_statuses(
        self, client_id: int | None, job_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, tuple[int, JobStatus]]:
        return {
            j: found
            for j in job_ids
            if (found := self.jobs.get(j)) is not None and client_id in (None, found[0])
        }


class FakeHeld:
    def __init__(self, letter: DeadLetter) -> None:
        self._letter = letter
        self.replayed = False

    @property
    def letter(self) -> DeadLetter:
        return self._letter

    async def replay(self) -> None:
        self.replayed = True


class FakeQueue:
    def __init__(self, letters: Sequence[DeadLetter]) -> None:
        self.held = [FakeHeld(letter) for letter in letters]

    @contextlib.asynccontextmanager
    async def browse(self, max_messages: int) -> AsyncIterator[Sequence[FakeHeld]]:
        yield self.held[:max_messages]


def admin_of(client: int) -> Principal:
    return Principal("root", client, frozenset({Permission.IMPORT_ADMIN}))


async def test_dead_letters_are_scoped_to_the_caller_s_client() -> None:
    mine, ended, theirs = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    store = FakeStore(
        {mine: (1, JobStatus.IMPORTING), ended: (1, JobStatus.FAILED), theirs: (2, JobStatus.READY)}
    )
    queue = FakeQueue([letter(mine), letter(None), letter(theirs), letter(ended), letter(mine, 1)])
    service = AdminService(store, queue)

    page = await service.dead_letters(admin_of(1), limit=2)
    assert [item.letter.job_id for item in page.items] == [mine, ended]
    assert (page.scanned, page.more) == (5, True)
    everything = await service.dead_letters(None, limit=10)  # the command line sees all
    assert len(everything.items) == 5

    outcome = await service.replay(admin_of(1))
    assert [h.replayed for h in queue.held] == [True, False, False, False, True]
    assert [s.verdict for s in outcome.skipped] == [Verdict.JOB_ENDED]


async def test_admin_operations_need_the_permission_and_a_broker() -> None:
    service = AdminService(FakeStore({}), None)
    plain = Principal("ana", 1, frozenset({Permission.CONTACT_IMPORT_CREATE}))
    with pytest.raises(PermissionDeniedError):
        await service.requeue(plain, uuid.uuid4())
    with pytest.raises(PermissionDeniedError):
        await service.dead_letters(plain, 10)
    with pytest.raises(NoBrokerError):
        await service.dead_letters(admin_of(1), 10)
