"""The interfaces the pipeline and the services talk to; adapters implement them."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from importer.accelerator import RateDecision
from importer.exceptions import ChecksumMismatchError, InvalidObjectKeyError
from importer.models import (
    Batch,
    Checkpoint,
    ConflictStrategy,
    Counters,
    InputFormat,
    Job,
    JobStatus,
    JobWarning,
    Reason,
    RowIssue,
)


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
    source_size: int | None = None  # sealed: the worker verifies the stored bytes against them
    source_sha256: str | None = None
    filename: str | None = None
    has_sensitive_data: bool = False
    has_underage_data: bool = False
    data_processing_purpose: str | None = None
    lgpd_processing_hypothesis: int | None = None
    tags: Sequence[str] | None = None
    kind: str = "contacts"
    # The creating process runs the job itself (the CLI): no worker claims it. It is created
    # under this lease of its own (renewed by its heartbeat).
    in_process: bool = False
    lease_owner: str | None = None
    lease_s: float = 0.0
    local_path: str | None = None  # the CLI's file (absolute), sealed by source_size/sha256


@dataclass(frozen=True, slots=True)
class JobView:
    """An import as the API shows it.

    ``counters`` are the chunk ledger's sums while the job runs and the job row's once it is
    terminal; ``rows_done`` is their ``rows_read`` and ``bytes_read`` the furthest offset a
    done chunk reached.
    """

    id: uuid.UUID
    client_id: int
    user_id: str | None
    status: JobStatus
    conflict_strategy: ConflictStrategy
    input_format: InputFormat
    source: str  # the storage key
    filename: str | None
    source_size: int | None
    source_sha256: str | None
    counters: Counters
    rows_done: int
    bytes_read: int
    bytes_total: int | None
    fail_reason: str | None
    cancel_requested: bool
    journey_id: int | None
    tags: tuple[str, ...] | None
    last_operation_id: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    warnings: tuple[JobWarning, ...] = ()  # file-level warnings (suspect_encoding)
    # What a watcher sees (importer/progress.py): any batch committed, the run's reader at the
    # end of the file, rows and bytes committed in the last RATE_WINDOW_S, the place of a queued
    # job in the claim's order (1: the next claim takes it).
    batches_done: bool = False
    read_to_end: bool = False
    recent_rows: int = 0
    recent_bytes: int = 0
    queue_position: int | None = None


@dataclass(frozen=True, slots=True)
class LeaseState:
    """What renewing a lease found: still ours, and whether a cancel was requested."""

    held: bool
    cancel_requested: bool


@dataclass(frozen=True, slots=True)
class Requeued:
    """A job the owner put back to ``queued``: its next run (1 was the first)."""

    job_id: uuid.UUID
    client_id: int
    run: int
    finalizations_removed: int  # the previous run's import_batch_finalized row (0 or 1)


@dataclass(frozen=True, slots=True)
class RemovedData:
    """What removing an import's data removed (all zero on a repeat)."""

    job_id: uuid.UUID
    client_id: int
    contacts: int  # soft-deleted (deleted_at set), with their channels
    details: int
    chunks: int  # ledger rows: a requeue then reads the whole file again
    row_errors: int
    removed_at: dt.datetime  # the first removal's time


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A chunk message in the dead-letter queue, as its owner sees it. ``job_id``, ``chunk``
    and ``partition`` are None when the body is not a chunk message (it went there for that)."""

    message_id: str | None
    job_id: uuid.UUID | None
    chunk: int | None
    partition: int | None
    error: str | None
    attempts: int  # failed deliveries, carried across re-publishes (T12)
    dead_lettered_at: str | None  # ISO 8601, UTC


class HeldDeadLetter(Protocol):
    """A dead letter taken from its queue and held (unacknowledged) while its owner decides;
    handed back to the queue unless replayed."""

    @property
    def letter(self) -> DeadLetter: ...

    async def replay(self) -> None:
        """Publish it to the main queue (confirmed, attempts carried), then drop this copy."""
        ...


class DeadLetterQueue(Protocol):
    """The dead-letter queue of chunk messages (multi-instance mode)."""

    def browse(
        self, max_messages: int
    ) -> contextlib.AbstractAsyncContextManager[Sequence[HeldDeadLetter]]:
        """The first ``max_messages`` letters, held until the block ends; then every letter not
        replayed goes back to the queue."""
        ...


@dataclass(frozen=True, slots=True)
class Finalized:
    """The terminal state written by the one finalization that won."""

    status: JobStatus
    counters: Counters


class Store(Protocol):
    """PostgreSQL, the source of truth (or the in-memory reference model in tests)."""

    async def create_job(self, new_job: NewJob, status: JobStatus) -> Job: ...

    async def get_job(self, job_id: uuid.UUID) -> Job: ...

    async def transition(
        self, job_id: uuid.UUID, target: JobStatus, *, owner: str | None = None
    ) -> None:
        """Move the job through the one guarded statement; with ``owner``, only while its lease
        is held (else :class:`LeaseLostError`)."""
        ...

    async def mark_read_to_end(self, job_id: uuid.UUID, *, owner: str | None = None) -> None:
        """The run's reader reached the end of the file (the phase ``finalizing``)."""
        ...

    async def ensure_custom_fields(self, job: Job, names: Sequence[str]) -> int:
        """Create the client's missing custom fields; return how many were new."""
        ...

    async def done_batches(self, job_id: uuid.UUID) -> frozenset[tuple[int, int, int]]:
        """The ledger's (chunk_no, partition, part) keys: whole batches and split pieces."""
        ...

    async def checkpoint(self, job_id: uuid.UUID, partitions: int) -> Checkpoint | None:
        """Where a resumed run starts reading (``lifecycle.checkpoint``); None: from the start."""
        ...

    async def apply_batch(self, job: Job, batch: Batch, *, lane: bool = False) -> Counters | None:
        """Apply a batch (or a piece of one, :attr:`Batch.part`), its issues, counters and done
        mark atomically; None if already done. With ``lane`` (multi-instance imports) only in
        chunk order within the batch's key partition: LaneNotReadyError while an earlier chunk
        of it is missing, None once the lane has passed it."""
        ...

    async def discard_batch(
        self,
        job: Job,
        batch: Batch,
        attempts: int,
        error: str,
        *,
        reason: Reason = Reason.CHUNK_DISCARDED,
        lane: bool = False,
    ) -> None:
        """Record a batch given up after all retries, or a poison row the database refused
        (``reason`` row_rejected): its valid rows count as ``error``, each with ``reason``."""
        ...

    async def given_up_error(self, job_id: uuid.UUID, batch: Batch) -> str | None:
        """Why ``batch`` was given up after its retries (recorded discarded, its rows reported
        ``chunk_discarded``), or None: applied, rejected row by row, or not recorded."""
        ...

    def client_turn(
        self, client_id: int, stop: asyncio.Event
    ) -> contextlib.AbstractAsyncContextManager[bool]:
        """The client's import turn for a run: imports of one client apply one at a time.
        Yields False if ``stop`` is set before the turn comes."""
        ...

    async def open_lanes(self, job_id: uuid.UUID, partitions: int) -> None:
        """Create the job's lanes (multi-instance imports), each at its first missing chunk."""
        ...

    async def advance_lane(self, job: Job, batch: Batch) -> bool:
        """Move a split batch's lane past it once all its pieces are in."""
        ...

    async def lanes_behind(self, job_id: uuid.UUID) -> int | None:
        """The chunk all the job's lanes have passed; None without lanes."""
        ...

    async def finalize(
        self,
        job_id: uuid.UUID,
        fail_reason: str | None,
        *,
        cancelled: bool = False,
        owner: str | None = None,
    ) -> Finalized | None:
        """Move the job to its terminal status exactly once; None when another caller did.

        ``cancelled`` ends it ``cancelled`` (else ``failed`` with a reason, or completed). With
        ``owner``, nothing is written unless that worker still holds the lease
        (:class:`LeaseLostError`).
        """
        ...

    async def add_warning(self, job_id: uuid.UUID, warning: JobWarning) -> None:
        """Record a file-level warning on the job, once per code (a repeat adds nothing)."""
        ...

    def row_issues(self, job_id: uuid.UUID) -> AsyncIterator[RowIssue]:
        """The error report's rows by line: the job's file-level warnings first (line 0)."""
        ...


class JobQueue(Store, Protocol):
    """The store as a worker sees it: jobs are claimed under a lease, renewed, released."""

    async def claim_job(self, owner: str, lease_s: float, max_per_client: int) -> Job | None:
        """Lease the oldest claimable job to ``owner``, or None; never the same job twice."""
        ...

    async def renew_lease(self, job_id: uuid.UUID, owner: str, lease_s: float) -> LeaseState:
        """Extend the lease if ``owner`` still holds it."""
        ...

    async def release_lease(self, job_id: uuid.UUID, owner: str) -> None:
        """Let another worker claim the job at once (if ``owner`` holds it)."""
        ...

    async def take_over_job(
        self, job_id: uuid.UUID, owner: str, lease_s: float, operation_id: str
    ) -> Job:
        """Lease an ended or abandoned job to ``owner`` for its next run in that process
        (``importer job resume``); raises the refusal (``lifecycle.requeue_refusal``)."""
        ...

    async def wait_for_jobs(self, timeout_s: float) -> None:
        """Return when a job was queued, or after ``timeout_s``."""
        ...


class Source(Protocol):
    """A file to import, read as a stream of byte blocks."""

    name: str
    size: int | None

    def blocks(self, block_size: int) -> AsyncIterator[bytes]: ...


class Throttle(Protocol):
    """Lets an import give way to more urgent work in its process (the API's requests)."""

    async def wait_turn(self) -> None:
        """Return when the import may do its next piece of work (soon, in any case)."""
        ...


class Progress(Protocol):
    """Receives the pipeline's progress; called once per batch, never per row."""

    def on_start(self, bytes_total: int | None) -> None: ...

    def on_batch(self, counters: Counters, bytes_read: int) -> None: ...


class PipelineObserver(Protocol):
    """Receives what the pipeline and the workers do, for metrics.

    Called once per block, batch or job, never per row: the import's hot path stays cheap.
    """

    def on_job_started(self, client_id: int) -> None: ...

    def on_job_finished(self, client_id: int, status: JobStatus | None, seconds: float) -> None:
        """A job's run in this process ended; ``status`` is None unless the job is terminal."""
        ...

    def on_bytes_read(self, count: int) -> None: ...

    def on_records_read(self, count: int) -> None:
        """The reader parsed ``count`` more records (header excluded)."""
        ...

    def on_queue_depth(self, change: int) -> None:
        """Batches entered (positive) or left (negative) the pipeline's in-process queues."""
        ...

    def on_batch_applied(self, counters: Counters, seconds: float, repeated: bool) -> None:
        """A batch committed (``repeated``: the ledger had it, a no-op), after ``seconds``."""
        ...

    def on_batch_retry(self) -> None: ...

    def on_batch_split(self) -> None: ...

    def on_batch_discarded(self, counters: Counters, rejected: bool) -> None:
        """A batch given up after its retries, or (``rejected``) a poison row alone."""
        ...


class HintWatch(Protocol):
    """One reader's watch on a job's progress hints (an SSE stream's)."""

    changed: asyncio.Event  # set when a hint for the job arrives, or when ``live`` changes

    @property
    def live(self) -> bool:
        """Hints are arriving (subscribed); False: Redis is away, poll at the usual cadence."""
        ...


class ProgressHints(Protocol):
    """Advisory "this job changed" notices from any process: a reason to read the job from the
    database sooner, never its state."""

    def watch(self, job_id: uuid.UUID) -> contextlib.AbstractAsyncContextManager[HintWatch]: ...


class RateLimiter(Protocol):
    """Counts a client's import creations; fails open (allows) when its backing store fails."""

    async def admit(self, client_id: int) -> RateDecision: ...


class NullObserver:
    """Observes nothing: the default of the pipeline and the workers."""

    def on_job_started(self, client_id: int) -> None:
        pass

    def on_job_finished(self, client_id: int, status: JobStatus | None, seconds: float) -> None:
        pass

    def on_bytes_read(self, count: int) -> None:
        pass

    def on_records_read(self, count: int) -> None:
        pass

    def on_queue_depth(self, change: int) -> None:
        pass

    def on_batch_applied(self, counters: Counters, seconds: float, repeated: bool) -> None:
        pass

    def on_batch_retry(self) -> None:
        pass

    def on_batch_split(self) -> None:
        pass

    def on_batch_discarded(self, counters: Counters, rejected: bool) -> None:
        pass


# --- object storage ---------------------------------------------------------------------------

# S3's limit on a key's UTF-8 length; the local store keeps the same rule, so a key that works
# on disk works on S3.
MAX_KEY_BYTES = 1024


@dataclass(frozen=True, slots=True)
class StoredObject:
    """An object as stored: its key, its size in bytes and the sha256 of its bytes (hex)."""

    key: str
    size: int
    sha256: str


class ObjectStore(Protocol):
    """Uploaded import files: S3, or a local directory. Every key passes :func:`check_key`."""

    async def put_stream(
        self, key: str, chunks: AsyncIterator[bytes], max_bytes: int
    ) -> StoredObject:
        """Store the stream, hashing it on the way; all or nothing.

        Past ``max_bytes`` it raises :class:`ObjectTooLargeError` and leaves no object (and, on
        S3, no pending multipart upload) behind; so does any other failure.
        """
        ...

    async def stat(self, key: str) -> StoredObject:
        """The object's size and sha256, computed by reading it."""
        ...

    async def seal(self, key: str) -> tuple[StoredObject, str]:
        """The object's size and sha256 (computed by reading it) and the token pinning the bytes
        read (see :meth:`verify`): ``importer import s3://…`` seals what it imports."""
        ...

    async def verify(self, key: str, size: int, sha256: str) -> str:
        """Hash the stored bytes against the sealed values; return a token pinning them.

        Raises :class:`ChecksumMismatchError` when they differ. The token (S3: the ETag; local:
        inode, size and mtime) makes :meth:`blocks` refuse any other bytes under the same key.
        """
        ...

    def blocks(
        self, key: str, block_size: int, *, pinned: str | None = None, start: int = 0
    ) -> AsyncIterator[bytes]:
        """Stream the object from ``start`` in blocks of ``block_size`` (the last may be shorter).

        With ``pinned``, an object replaced since :meth:`verify` raises
        :class:`ChecksumMismatchError` instead of feeding different bytes.
        """
        ...

    async def presign_put(self, key: str, expires_s: int) -> str | None:
        """A URL a client can PUT the file to directly, or None (the API then offers a route)."""
        ...

    async def delete(self, key: str) -> None:
        """Remove the object; a missing one is not an error."""
        ...

    async def ensure_bucket(self) -> None:
        """Create the bucket (or directory) if it is missing."""
        ...


def key_problem(key: str) -> str | None:
    """Why ``key`` is not a safe object key, or None when it is.

    One rule for both stores: relative, '/'-separated segments, none of them empty, '.' or '..',
    no NUL, at most ``MAX_KEY_BYTES`` of UTF-8. So no key can leave the local store's directory,
    and a key accepted on disk is accepted by S3.
    """
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    problems = (
        (size == 0, "is empty"),
        (size > MAX_KEY_BYTES, f"is longer than {MAX_KEY_BYTES} bytes"),
        ("\x00" in key, "contains NUL"),
        (key.startswith("/"), "is absolute"),
        (any(s in ("", ".", "..") for s in key.split("/")), "has an empty, '.' or '..' segment"),
    )
    return next((why for found, why in problems if found), None)


def check_key(key: str) -> str:
    """``key`` itself when it is safe (see :func:`key_problem`); else InvalidObjectKeyError."""
    problem = key_problem(key)
    if problem is not None:
        raise InvalidObjectKeyError(f"object key {key[:80]!r} {problem}")
    return key


def check_sealed(found: StoredObject, size: int, sha256: str) -> None:
    """Raise ChecksumMismatchError unless the stored bytes are the sealed ones."""
    if found.size != size or found.sha256 != sha256.lower():
        raise ChecksumMismatchError(
            f"object {found.key!r} has {found.size} bytes, sha256 {found.sha256};"
            f" sealed: {size} bytes, sha256 {sha256}"
        )


# --- outbox relay -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """An outbox row: ``message_id`` is stable, so a re-publish carries the same id."""

    id: int
    message_id: str
    topic: str
    payload: bytes  # JSON


class Outbox(Protocol):
    """The outbox table as the relay sees it."""

    async def publish_pending(
        self,
        limit: int,
        topics: Sequence[str],
        publish: Callable[[Sequence[OutboxMessage]], Awaitable[Collection[int]]],
    ) -> int:
        """In one transaction: lock up to ``limit`` unpublished messages of ``topics`` (skipping
        those another relay holds), hand them to ``publish``, mark the ids it returns published,
        commit. The number of messages locked."""
        ...

    async def unknown_topics(self, topics: Sequence[str]) -> dict[str, int]:
        """Unpublished messages per topic not in ``topics`` (no relay publishes them)."""
        ...

    async def wait_for_messages(self, timeout_s: float) -> None:
        """Return when a message was written since the last call, or after the timeout."""
        ...

    async def close(self) -> None: ...


class MessagePublisher(Protocol):
    """Publishes to a queue and returns once the broker confirmed it (else raises)."""

    async def publish(
        self,
        queue: str,
        body: bytes,
        *,
        message_id: str,
        headers: Mapping[str, Any] | None = None,
    ) -> None: ...

    async def close(self) -> None: ...
