"""Pipeline observers that add to the metrics: the Redis progress hints of a job."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from importer.core.accelerator import ProgressHint
from importer.core.models import Counters, JobStatus

if TYPE_CHECKING:  # ports name RateDecision: imported at run time, this would be a cycle
    from importer.ports import PipelineObserver


def job_in_context() -> uuid.UUID | None:
    """The job whose work this task does, from the log context.

    The worker binds ``job_id`` around a job's run (its pipeline's tasks inherit it) and the
    chunk consumer around each delivery: the observer's calls carry no job of their own.
    """
    bound = structlog.contextvars.get_contextvars().get("job_id")
    try:
        return uuid.UUID(str(bound)) if bound is not None else None
    except ValueError:
        return None


class HintingObserver:
    """A :class:`~importer.ports.PipelineObserver` that forwards every call to ``inner`` (the
    metrics) and offers a hint when a batch commits or a job ends.

    ``offer`` must not block: it is called on the batch path (the Redis publisher schedules the
    publish as a task, or drops the hint when too many are in flight).
    """

    def __init__(self, inner: PipelineObserver, offer: Callable[[ProgressHint], None]) -> None:
        self._inner = inner
        self._offer = offer

    def _hint(self, event: str, rows: int = 0) -> None:
        job_id = job_in_context()
        if job_id is not None:
            self._offer(ProgressHint(job_id, event, rows))

    def on_job_started(self, client_id: int) -> None:
        self._inner.on_job_started(client_id)

    def on_job_finished(self, client_id: int, status: JobStatus | None, seconds: float) -> None:
        self._inner.on_job_finished(client_id, status, seconds)
        if status is not None:
            self._hint("finished")

    def on_bytes_read(self, count: int) -> None:
        self._inner.on_bytes_read(count)

    def on_records_read(self, count: int) -> None:
        self._inner.on_records_read(count)

    def on_queue_depth(self, change: int) -> None:
        self._inner.on_queue_depth(change)

    def on_batch_applied(self, counters: Counters, seconds: float, repeated: bool) -> None:
        self._inner.on_batch_applied(counters, seconds, repeated)
        if not repeated:
            self._hint("batch", counters.rows_read)

    def on_batch_retry(self) -> None:
        self._inner.on_batch_retry()

    def on_batch_split(self) -> None:
        self._inner.on_batch_split()

    def on_retention(self, jobs: int, objects: int, raw_values: int, journal_rows: int) -> None:
        self._inner.on_retention(jobs, objects, raw_values, journal_rows)

    def on_batch_discarded(self, counters: Counters, rejected: bool) -> None:
        self._inner.on_batch_discarded(counters, rejected)
        self._hint("batch", counters.rows_read)
