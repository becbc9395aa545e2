"""The interfaces the pipeline and the services talk to; adapters implement them."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from importer.models import Batch, Counters, Job, JobStatus, RowIssue


@dataclass(frozen=True, slots=True)
class NewJob:
    """What creating an import needs; the store assigns nothing else."""

    id: uuid.UUID
    client_id: int
    user_id: str | None
    source: str
    input_format: str
    strategy: str
    chunk_size: int
    partitions: int
    layout: dict[str, object] | None = None
    has_internationalization: bool = False
    bytes_total: int | None = None
    journey_id: int | None = None
    auto_start_journey_mailing: bool | None = None


@dataclass(frozen=True, slots=True)
class Finalized:
    """The terminal state written by the one finalization that won."""

    status: JobStatus
    counters: Counters


class Store(Protocol):
    """PostgreSQL, the source of truth (or the in-memory reference model in tests)."""

    async def create_job(self, new_job: NewJob, status: JobStatus) -> Job: ...

    async def get_job(self, job_id: uuid.UUID) -> Job: ...

    async def transition(self, job_id: uuid.UUID, target: JobStatus) -> None: ...

    async def ensure_custom_fields(self, job: Job, names: Sequence[str]) -> int:
        """Create the client's missing custom fields; return how many were new."""
        ...

    async def done_batches(self, job_id: uuid.UUID) -> frozenset[tuple[int, int]]: ...

    async def apply_batch(self, job: Job, batch: Batch) -> Counters | None:
        """Apply a batch, its issues, counters and done mark atomically; None if already done."""
        ...

    async def discard_batch(self, job: Job, batch: Batch, attempts: int, error: str) -> None:
        """Record a batch given up after all retries: its valid rows count as ``error``."""
        ...

    async def finalize(self, job_id: uuid.UUID, fail_reason: str | None) -> Finalized | None:
        """Move the job to its terminal status exactly once; None when another caller did."""
        ...

    def row_issues(self, job_id: uuid.UUID) -> AsyncIterator[RowIssue]: ...


class Source(Protocol):
    """A file to import, read as a stream of byte blocks."""

    name: str
    size: int | None

    def blocks(self, block_size: int) -> AsyncIterator[bytes]: ...


class Progress(Protocol):
    """Receives the pipeline's progress; called once per batch, never per row."""

    def on_start(self, bytes_total: int | None) -> None: ...

    def on_batch(self, counters: Counters, bytes_read: int) -> None: ...
