"""Pure decisions: job status transitions, batch outcome counters and retry routing."""

from __future__ import annotations

from collections.abc import Iterable

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
    JobStatus.NORMALIZING: frozenset({JobStatus.QUEUED}),
    JobStatus.READY: frozenset({JobStatus.NORMALIZING}),
    JobStatus.IMPORTING: frozenset({JobStatus.NORMALIZING, JobStatus.READY}),
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
