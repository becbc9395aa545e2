"""Pure decisions: job status transitions, starts, cancels and run endings, batch outcome
counters and retry routing."""

from __future__ import annotations

import enum
from collections.abc import Iterable

from importer.exceptions import (
    IllegalTransitionError,
    ImportAlreadyAppliedError,
    ImporterError,
    JobNotReadyError,
)
from importer.models import (
    TERMINAL_STATUSES,
    Batch,
    ConflictStrategy,
    Counters,
    JobStatus,
)

_NON_TERMINAL = frozenset(JobStatus) - TERMINAL_STATUSES

# target status → the statuses it may be reached from (seed 001's state machine).
ALLOWED_SOURCES: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.UPLOADING: frozenset(),
    JobStatus.UPLOADED: frozenset({JobStatus.UPLOADING}),
    JobStatus.QUEUED: frozenset({JobStatus.UPLOADED, JobStatus.QUEUED}),
    # A run resumed by another worker (its lease expired) re-enters the status it stopped in.
    JobStatus.NORMALIZING: frozenset({JobStatus.QUEUED, JobStatus.NORMALIZING}),
    JobStatus.READY: frozenset({JobStatus.NORMALIZING, JobStatus.READY}),
    JobStatus.IMPORTING: frozenset({JobStatus.NORMALIZING, JobStatus.READY, JobStatus.IMPORTING}),
    JobStatus.COMPLETED: frozenset({JobStatus.IMPORTING}),
    JobStatus.COMPLETED_WITH_PLACEHOLDERS: frozenset({JobStatus.IMPORTING}),
    JobStatus.FAILED: _NON_TERMINAL,
    JobStatus.CANCELLED: _NON_TERMINAL,
}


def allowed_sources(target: JobStatus) -> list[str]:
    """The statuses a guarded ``UPDATE … WHERE status = ANY(…)`` accepts for ``target``."""
    return sorted(s.value for s in ALLOWED_SOURCES[target])


def can_transition(current: JobStatus, target: JobStatus) -> bool:
    return current in ALLOWED_SOURCES[target]


# --- jobs and workers -------------------------------------------------------------------------

# Statuses a worker runs a job in; a job in one of them whose lease expired lost its worker.
RUNNING_STATUSES = frozenset({JobStatus.NORMALIZING, JobStatus.READY, JobStatus.IMPORTING})
# Statuses a worker may claim a job in (when no live lease holds it).
CLAIMABLE_STATUSES = RUNNING_STATUSES | {JobStatus.QUEUED}
# Statuses before any run: a job in them that no worker claimed has nothing to stop.
WAITING_STATUSES = frozenset({JobStatus.UPLOADING, JobStatus.UPLOADED, JobStatus.QUEUED})


def values(statuses: Iterable[JobStatus]) -> list[str]:
    """Status values for a bound ``text[]`` parameter, in a stable order."""
    return sorted(s.value for s in statuses)


def entry_status(current: JobStatus) -> JobStatus:
    """The status a run starts by moving to: a queued job normalizes; a resumed job re-enters
    the status its previous run stopped in (the ledger skips its done batches)."""
    if current in (JobStatus.READY, JobStatus.IMPORTING):
        return current
    return JobStatus.NORMALIZING


def start_refusal(current: JobStatus) -> ImporterError | None:
    """Why a job in ``current`` cannot be started, or None (a queued job stays queued).

    ``uploading``: the file is not there yet. Anything past ``queued``: the one-time gate.
    """
    if current is JobStatus.UPLOADING:
        return JobNotReadyError()
    if can_transition(current, JobStatus.QUEUED):
        return None
    return ImportAlreadyAppliedError()


def upload_target(current: JobStatus, ok: bool) -> JobStatus | None:
    """Where confirming an upload (``ok``: the bytes match the sealed size and sha256) moves a
    job in ``current``: uploaded, or failed. None: a repeated confirmation changes nothing."""
    target = JobStatus.UPLOADED if ok else JobStatus.FAILED
    if current is JobStatus.UPLOADING:
        return target
    if current is target:
        return None
    raise IllegalTransitionError(f"the import is {current.value}, not uploading")


class CancelAction(enum.Enum):
    NOW = "now"  # no run ever started: finalize ``cancelled`` at once, counters zero
    REQUEST = "request"  # a worker holds (or held) the job: it stops between chunks
    NOTHING = "nothing"  # terminal already: a repeated cancel changes nothing


def cancel_action(current: JobStatus, claimed: bool) -> CancelAction:
    """What cancelling a job in ``current`` does; ``claimed``: a lease was ever taken on it."""
    if current in TERMINAL_STATUSES:
        return CancelAction.NOTHING
    if current in WAITING_STATUSES and not claimed:
        return CancelAction.NOW
    return CancelAction.REQUEST


def final_status(fail_reason: str | None, cancelled: bool) -> JobStatus:
    """The terminal status finalization aims at (completed may become with placeholders)."""
    if cancelled:
        return JobStatus.CANCELLED
    if fail_reason is not None:
        return JobStatus.FAILED
    return JobStatus.COMPLETED


class RunEnding(enum.Enum):
    FINISHED = "finished"  # the run finalized the job
    LEASE_LOST = "lease_lost"  # another worker owns the job: write nothing more
    CANCELLED = "cancelled"  # stopped for a cancel: finalize ``cancelled`` from the ledger
    INTERRUPTED = "interrupted"  # a service failed: let the lease expire, a later claim resumes
    RELEASED = "released"  # stopped (shutdown): release the lease, the next claim resumes


def run_ending(
    *, finished: bool, lease_lost: bool, cancel_requested: bool, interrupted: bool
) -> RunEnding:
    """How a worker ends a job once its run returned.

    A lost lease forbids any write; a cancel is honoured even after an interruption (the
    database may well be there); an interrupted job is not released, so it is not reclaimed
    at once, in a loop, while the failing service is away.
    """
    if finished:
        return RunEnding.FINISHED
    if lease_lost:
        return RunEnding.LEASE_LOST
    if cancel_requested:
        return RunEnding.CANCELLED
    if interrupted:
        return RunEnding.INTERRUPTED
    return RunEnding.RELEASED


# The heartbeat also carries the cancel check: a cancel takes effect within this many seconds.
HEARTBEAT_MAX_S = 2.0


def heartbeat_interval(lease_s: float) -> float:
    """Renew at least three times per lease (two renewals may fail before it can expire), and
    at least every ``HEARTBEAT_MAX_S`` so that a cancel stops the run promptly."""
    return min(lease_s / 3, HEARTBEAT_MAX_S)


def batch_counters(batch: Batch, strategy: ConflictStrategy, new_keys: int) -> Counters:
    """Counters of an applied batch, given how many of its distinct keys were new.

    Per key, its first row in the batch is ``inserted`` when the key was new; every other valid
    row is ``updated`` (MERGE) or ``ignored`` (DISCARD).
    """
    valid = len(batch.rows)
    rest = valid - new_keys
    return Counters(
        rows_read=batch.rows_read,
        inserted=new_keys,
        updated=rest if strategy is ConflictStrategy.MERGE else 0,
        ignored=rest if strategy is ConflictStrategy.DISCARD else 0,
        invalid=batch.invalid,
    )


def discarded_counters(batch: Batch) -> Counters:
    """Counters of a batch given up after all retries: its valid rows count as ``error``."""
    return Counters(rows_read=batch.rows_read, invalid=batch.invalid, error=len(batch.rows))


def should_retry(attempt: int, max_attempts: int, transient: bool) -> bool:
    """Retry a failed batch while attempts remain and the failure may pass."""
    return transient and attempt < max_attempts


def retry_delay(attempt: int, base_seconds: float = 0.2, cap_seconds: float = 5.0) -> float:
    """Exponential backoff between in-process attempts."""
    return float(min(cap_seconds, base_seconds * 2 ** (attempt - 1)))


def sum_counters(parts: Iterable[Counters]) -> Counters:
    total = Counters()
    for part in parts:
        total.add(part)
    return total


# New contacts after which the importer refreshes the planner's statistics; doubles each time.
FIRST_ANALYZE_AFTER = 20_000
_LAST_ANALYZE_STEP = 2_000_000


def next_analyze_threshold(current: int) -> int:
    """The next ANALYZE comes after twice as many inserts, up to a fixed step."""
    return min(current * 2, _LAST_ANALYZE_STEP)
