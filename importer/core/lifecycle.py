"""Pure decisions: job status transitions, starts, cancels and run endings, batch outcome
counters, retry routing and the splitting of refused batches."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from importer.core.errors import (
    IllegalTransitionError,
    ImportAlreadyAppliedError,
    ImporterError,
    JobNotReadyError,
    JourneyStartedError,
    NotAPreviewError,
    RetentionExpiredError,
)
from importer.core.models import (
    TERMINAL_STATUSES,
    Batch,
    Checkpoint,
    ConflictStrategy,
    Counters,
    JobStatus,
    RowIssue,
)

# An undo (its own way, UNDO_SOURCES) is neither cancelled nor failed half-way: it resumes.
_NON_TERMINAL = frozenset(JobStatus) - TERMINAL_STATUSES - {JobStatus.UNDOING}

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
    JobStatus.UNDOING: frozenset(),  # by an undo only (UNDO_SOURCES)
    JobStatus.UNDONE: frozenset(),
}

# An undo (issue 15), apart from ALLOWED_SOURCES like a requeue: an ended import that wrote
# rows goes to ``undoing`` (again, when an undo stopped half-way resumes), then ``undone``.
UNDO_SOURCES = frozenset(
    {
        JobStatus.COMPLETED,
        JobStatus.COMPLETED_WITH_PLACEHOLDERS,
        JobStatus.FAILED,
        JobStatus.CANCELLED,
        JobStatus.UNDOING,
    }
)


# The owner's way back to ``queued`` (seed 001's runbook: remove the data, requeue), apart from
# ALLOWED_SOURCES on purpose: a user's start goes by ALLOWED_SOURCES[QUEUED], and must never
# bring an ended job back (the one-time gate). A failed or cancelled run may be requeued as it
# is (the next run resumes from the ledger); a completed one only once its data was removed.
REQUEUE_SOURCES = frozenset({JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.UNDONE})
REQUEUE_AFTER_REMOVAL_SOURCES = TERMINAL_STATUSES


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


def requeue_sources(data_removed: bool) -> list[str]:
    """The statuses the guarded requeue (``requeue_job``) accepts: an ended job's, or an
    abandoned one's (see :func:`requeue_refusal`, which decides on the locked row)."""
    ended = REQUEUE_AFTER_REMOVAL_SOURCES if data_removed else REQUEUE_SOURCES
    return values(ended | CLAIMABLE_STATUSES)


def requeue_refusal(
    current: JobStatus,
    *,
    data_removed: bool,
    lease_live: bool,
    in_process: bool = False,
    awaiting_apply: bool = False,
) -> ImporterError | None:
    """Why the owner cannot requeue (for the workers) or resume (``importer job resume``, in
    its own process) a job in ``current``, or None; ``lease_live``: a lease on it has not
    expired; ``in_process``: a command-line job (no worker claims it).

    Accepted: a failed or cancelled job (a completed one only once its data was removed: it
    has passed the one-time gate), and an abandoned one, whose lease expired (its process
    died): running, or a command-line job still queued (it died waiting for its client's
    turn). A live lease means a process still runs it; a job still on its way has not run yet
    (a worker's queued job is the workers' to claim): nothing to take over. A preview resting
    until its apply is not abandoned: it is applied (or cancelled), not requeued.
    """
    if awaiting_apply:
        return IllegalTransitionError(
            "the import is a preview waiting for its apply: apply it (POST /apply, "
            "`importer job apply`) or cancel it"
        )
    if current in RUNNING_STATUSES or (in_process and current is JobStatus.QUEUED):
        if lease_live:
            return IllegalTransitionError(
                f"the import is {current.value} and its lease is live: a process still runs it"
                " (if that process died, try again once its lease expired)"
            )
        return None
    if current not in TERMINAL_STATUSES:
        return IllegalTransitionError(
            f"the import is {current.value}: only an ended or abandoned one"
        )
    if current.value not in requeue_sources(data_removed):
        return ImportAlreadyAppliedError(
            f"the import is {current.value}: remove its data first, then requeue it"
        )
    return None


def ended_values() -> list[str]:
    """The terminal statuses, bound for the SQL that starts a job's next run after one."""
    return values(TERMINAL_STATUSES)


def removal_refusal(current: JobStatus) -> ImporterError | None:
    """Why an import's data cannot be removed now: only an ended import's data can."""
    if current in TERMINAL_STATUSES:
        return None
    if current is JobStatus.UNDOING:
        return IllegalTransitionError("the import is being undone: undo it again to end that")
    return IllegalTransitionError(f"the import is {current.value}: cancel it first")


class CancelAction(enum.Enum):
    NOW = "now"  # no run ever started: finalize ``cancelled`` at once, counters zero
    REQUEST = "request"  # a worker holds (or held) the job: it stops between chunks
    NOTHING = "nothing"  # terminal already: a repeated cancel changes nothing


def cancel_action(current: JobStatus, claimed: bool) -> CancelAction:
    """What cancelling a job in ``current`` does; ``claimed``: a lease was ever taken on it."""
    if current in TERMINAL_STATUSES or current is JobStatus.UNDOING:
        return CancelAction.NOTHING  # an undo is never left half-way: it runs to its end
    if (current in WAITING_STATUSES or current is JobStatus.READY) and not claimed:
        return CancelAction.NOW
    return CancelAction.REQUEST


def cancel_claimed(*, leased: bool, in_process: bool, awaiting_apply: bool) -> bool:
    """Whether a cancel must be left to a run (``cancel_action``'s ``claimed``): a lease was
    taken on the job or its process runs it, unless it is a preview resting until its apply
    (no run holds it: it is cancelled at once)."""
    return (leased or in_process) and not awaiting_apply


class ApplyAction(enum.Enum):
    APPLY = "apply"  # hand the preview to its next run
    EXPIRE = "expire"  # waited past its time to live: finalize ``cancelled``


def apply_action(
    current: JobStatus, *, preview_requested: bool, awaiting_apply: bool, expired: bool
) -> ApplyAction:
    """What applying a job in ``current`` does; raises why it cannot be applied (a job that is
    no preview, or one applied, running or ended already)."""
    if awaiting_apply:
        return ApplyAction.EXPIRE if expired else ApplyAction.APPLY
    if not preview_requested:
        raise NotAPreviewError("only an import created with preview can be applied")
    if current in (JobStatus.QUEUED, JobStatus.NORMALIZING):
        raise IllegalTransitionError(f"the preview is {current.value}, not ready yet")
    raise ImportAlreadyAppliedError()


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


def with_refused_rows(batch: Batch, refused: Sequence[RowIssue]) -> Batch:
    """The batch with the rows of ``refused`` (invalid issues the store found out, such as a
    channel key's ``ambiguous_key``) moved from its valid rows to its invalid ones."""
    lines = {issue.line for issue in refused}
    return replace(
        batch,
        rows=tuple(r for r in batch.rows if r.line not in lines),
        issues=(*batch.issues, *refused),
        invalid=batch.invalid + len(lines),
    )


def discarded_counters(batch: Batch) -> Counters:
    """Counters of a batch given up after all retries, or of a rejected poison row: its valid
    rows count as ``error``."""
    return Counters(rows_read=batch.rows_read, invalid=batch.invalid, error=len(batch.rows))


class FailureKind(enum.Enum):
    TRANSIENT = "transient"  # may pass: a lost connection, a deadlock, a time-out
    CONTENT = "content"  # the database refused the rows: a constraint, a value it cannot store
    OTHER = "other"  # anything else: retrying or splitting cannot help


class FailureAction(enum.Enum):
    RETRY = "retry"  # a transient failure with attempts left: back off and try again
    DISCARD = "discard"  # give the piece up: its valid rows count as ``error``
    SPLIT = "split"  # the database refused the content: apply the halves, in order
    REJECT = "reject"  # a single row the database refuses: the poison row, alone an ``error``


def failure_action(
    batch: Batch, attempt: int, max_attempts: int, kind: FailureKind
) -> FailureAction:
    """What to do with a batch (or piece) whose apply failed on ``attempt``.

    Transient failures keep the retry/backoff path and are discarded whole once attempts run
    out: splitting cannot help a database that is away. A content failure splits the piece
    until the refused row stands alone, as pgloader's ``copy-retry-batch`` does; a piece
    without rows (its issues only) has nothing to split and is discarded, as is a piece that
    failed for any other reason (a missing table or a permission would fail every row alike).
    """
    if kind is FailureKind.TRANSIENT:
        return FailureAction.RETRY if attempt < max_attempts else FailureAction.DISCARD
    if kind is FailureKind.OTHER or not batch.rows:
        return FailureAction.DISCARD
    return FailureAction.SPLIT if len(batch.rows) > 1 else FailureAction.REJECT


def split_batch(batch: Batch) -> tuple[Batch, Batch]:
    """The two halves of a refused batch (or piece), to apply in this order.

    Rows keep file order (the first half holds the earlier rows), so per key, rows still reach
    the database in file order. Both halves keep chunk_no and partition; their parts are
    ``2p`` and ``2p + 1`` (see :attr:`Batch.part`), the same on every run, so a resumed run
    re-splitting the batch finds the pieces its ledger marks done. The first half carries the
    batch's issues and invalid count: each is recorded exactly once.
    """
    if len(batch.rows) < 2:
        raise ValueError("only a batch of two rows or more splits")
    middle = len(batch.rows) // 2
    first = replace(batch, rows=batch.rows[:middle], part=2 * batch.part)
    second = replace(
        batch,
        rows=batch.rows[middle:],
        issues=(),
        invalid=0,
        part=2 * batch.part + 1,
        first_line=batch.rows[middle].line,
    )
    return first, second


def is_within(part: int, ancestor: int) -> bool:
    """Whether piece ``part`` is ``ancestor`` or one of the pieces splitting it produces."""
    while part > ancestor:
        part //= 2
    return part == ancestor


def split_on_resume(part: int, done_parts: Iterable[int]) -> bool:
    """Whether a resumed run must split piece ``part`` without trying it whole: a previous run
    split it and committed some of its pieces (applying it whole would apply those twice)."""
    return any(p != part and is_within(p, part) for p in done_parts)


def done_parts(done: Iterable[tuple[int, int, int]]) -> dict[tuple[int, int], frozenset[int]]:
    """The ledger's done (chunk_no, partition, part) keys grouped by batch, for the pieces of
    split batches (whole batches, part 1, are skipped before they are queued)."""
    parts: dict[tuple[int, int], set[int]] = {}
    for chunk_no, partition, part in done:
        if part != 1:
            parts.setdefault((chunk_no, partition), set()).add(part)
    return {key: frozenset(found) for key, found in parts.items()}


def checkpoint(
    positions: Mapping[tuple[int, int], tuple[int, int]], partitions: int
) -> Checkpoint | None:
    """Where a resumed run starts reading, from the whole batches the ledger holds
    ((chunk_no, partition) → (end_offset, end_line)): after the last chunk of the prefix 0..c
    that every partition committed. None when chunk 0 is not whole. (The SQL twin is the
    ``checkpoint`` query.)"""
    found: Checkpoint | None = None
    chunk_no = 0
    while all((chunk_no, p) in positions for p in range(partitions)):
        end_offset, end_line = positions[(chunk_no, 0)]
        found = Checkpoint(chunk_no, end_offset, end_line)
        chunk_no += 1
    return found


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


class UndoAction(enum.Enum):
    RUN = "run"  # check the conflicts, then undo (or resume an undo that stopped half-way)
    NOTHING = "nothing"  # undone already: a repeated undo changes nothing


@dataclass(frozen=True, slots=True)
class UndoStart:
    """An undo as it begins: the job's client and run, and what the undo does."""

    job_id: uuid.UUID
    client_id: int
    run: int
    action: UndoAction


def undo_action(
    current: JobStatus, *, journaled: bool, data_removed: bool, expired: bool = False
) -> UndoAction:
    """What an undo of a job in ``current`` does, or the refusal it raises: an ended import with
    a journal whose data is still there (remove-data took it already otherwise) and within its
    retention (``expired``: ended longer ago than IMPORTER_RETENTION_DAYS, or purged)."""
    if current is JobStatus.UNDONE:
        return UndoAction.NOTHING
    if current not in UNDO_SOURCES:
        raise IllegalTransitionError(
            f"the import is {current.value}: only an ended import can be undone (cancel it first)"
        )
    if expired and current is not JobStatus.UNDOING:  # an undo under way was within it
        raise RetentionExpiredError(
            "the import ended longer ago than its retention: its undo journal is purged"
        )
    if not journaled:
        raise IllegalTransitionError(
            "the import has no undo journal (it ran before undo existed): remove its data instead"
        )
    if data_removed:
        raise IllegalTransitionError("the import's data was removed: there is nothing to undo")
    return UndoAction.RUN


# Seed 003 §9's classification statuses in which the journey has taken up the import's contacts
# (ACTIVE: processing them; DONE, EXPIRED: it ran): its links are the journey's, not the import's.
JOURNEY_STARTED = frozenset({"ACTIVE", "DONE", "EXPIRED"})
JOURNEY_CANCELED = "CANCELED"  # what an undo leaves of the classification of its import


def journey_refusal(classification_id: int, status: str) -> JourneyStartedError | None:
    """Why an undo leaves an import alone whose journey classification is ``status`` (None: it
    may go on — AWAITING_IMPORT, PAUSED or CANCELED — and cancels the classification)."""
    if status not in JOURNEY_STARTED:
        return None
    return JourneyStartedError(
        f"journey classification {classification_id} is {status}: the journey has taken up the"
        " import's contacts, so the undo leaves the import and its journey links as they are;"
        " pause or cancel the classification in the journey first"
    )


# The prefix of the fail_reason of a job whose undo failed (the owner undoes it again).
UNDO_FAILED = "undo_failed"
UNDO_REASON_CHARS = 500  # a failed undo's reason, kept whole up to this length


def undo_failure_reason(cause: str) -> str:
    """The fail_reason of a job whose undo step failed with ``cause``."""
    return f"{UNDO_FAILED}: {cause}"[:UNDO_REASON_CHARS]
