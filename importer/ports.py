"""The interfaces the pipeline and the services talk to; adapters implement them.

Every Protocol of the package is here (and the null objects), in the domain's words: the store
of a run (``Store``, ``JobQueue``), the API's and CLI's reads (``JobStore``, ``JobReader``,
``CatalogStore``, ``AdminStore``), files (``Source``, ``ObjectStore``), the broker (``Outbox``,
``MessagePublisher``, ``BatchPublisher``, ``Delivery``, ``DeliveryHandler``,
``DeadLetterQueue``), Redis (``ProgressHints``, ``RateLimiter``) and the observers.

Why this module is long: one place for every door between the rooms is the point; split by
room, a newcomer would look for a port in as many files as there are adapters.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from importer.core import lifecycle
from importer.core.accelerator import RateDecision
from importer.core.columns import CustomField, MemoryEntry
from importer.core.duplicates import Competition
from importer.core.keys import KeyGroups
from importer.core.models import (
    Batch,
    Checkpoint,
    ContactRow,
    Counters,
    DeadLetter,
    Finalized,
    Job,
    JobStatus,
    JobView,
    JobWarning,
    LeaseState,
    NewJob,
    OutboxMessage,
    Purged,
    Reason,
    RemovedData,
    Requeued,
    RetentionDue,
    RowIssue,
    StoredLayout,
)
from importer.core.objects import StoredObject
from importer.core.options import FiringIntent
from importer.core.preview import PreviewBuilder
from importer.core.webhooks import AttemptResult, ClientWebhook, DueDelivery, Outcome


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

    def duplicates(self, job_id: uuid.UUID) -> AsyncIterator[Competition]:
        """The duplicate report's rows by key and field (``core.duplicates.combined``)."""
        ...

    # --- outside the batches: a preview, a validation of the whole file first -----------------

    async def stage_preview(
        self, job_id: uuid.UUID, rows: Sequence[ContactRow], partition: int = 0
    ) -> None:
        """Keep valid rows of a preview (nothing is written to the contact tables), of a batch
        of key partition ``partition``."""
        ...

    async def plan_preview(
        self, job: Job, fields: Sequence[str]
    ) -> tuple[PreviewBuilder, list[str]]:
        """The staged rows, key by key in key order, planned against the client's contacts as
        they are now (``fields``: the custom field names the file uses), and the names of
        ``fields`` the client has no field for."""
        ...

    async def clear_preview(self, job_id: uuid.UUID) -> None:
        """Forget the staged rows (a preview's end, or a restarted preview's start)."""
        ...

    async def rest_ready(
        self,
        job_id: uuid.UUID,
        document: dict[str, object],
        ttl_s: float,
        *,
        owner: str | None = None,
    ) -> None:
        """End a preview: the job rests in ``ready`` with ``document`` until an apply, or until
        ``ttl_s`` seconds pass (then it expires ``cancelled``)."""
        ...

    async def add_row_issues(self, job_id: uuid.UUID, issues: Sequence[RowIssue]) -> None:
        """Report issues outside any batch (a preview's, a validation's)."""
        ...

    async def clear_row_issues(self, job_id: uuid.UUID) -> None:
        """Empty the job's error report (a run starting with an empty ledger)."""
        ...

    async def key_groups(self, job: Job) -> KeyGroups:
        """How the job's rows find their key partition (core.keys.KeyGroups; none under the
        CPF/CNPJ key or in one partition): the ones kept with the job, else read from the
        client's contacts and kept — for as long as its ledger, so every run that resumes from
        the ledger (a crash, a requeue) cuts the same batches as the runs before it."""
        ...

    async def ambiguous_rows(self, job: Job, rows: Sequence[ContactRow]) -> list[RowIssue]:
        """The ``ambiguous_key`` issues of ``rows`` under the job's channel key (core.keys),
        against the stored contacts as they are: a validation's count of what the batches will
        refuse (the client's import turn keeps them so until the batches apply)."""
        ...

    async def save_validation(
        self, job_id: uuid.UUID, validation: dict[str, object], *, owner: str | None = None
    ) -> None:
        """Record what the validation of the whole file found (``threshold.validation``)."""
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

    async def apply_preview(self, job_id: uuid.UUID, operation_id: str | None = None) -> None:
        """Hand a preview resting in ``ready`` to its next run; an expired one is cancelled and
        refused (PreviewExpiredError), anything else refused as ``lifecycle.apply_action``."""
        ...

    async def expire_previews(self) -> int:
        """Cancel the previews that waited past their time to live; how many."""
        ...

    async def fail_stale_undos(self) -> int:
        """Fail the undos whose lease expired (their process stopped); how many."""
        ...

    async def retention_due(self, cutoff: dt.datetime, limit: int) -> list[RetentionDue]:
        """Ended imports that ended before ``cutoff`` and are not purged yet, oldest first."""
        ...

    async def purge_job(self, job_id: uuid.UUID, at: dt.datetime) -> Purged:
        """Purge one import's personal data (its raw report values, its undo journal) and its
        chunk ledger."""
        ...

    async def sweep_outbox(self, before: dt.datetime, limit: int, *, unpublished: bool) -> int:
        """Delete at most ``limit`` outbox messages published before ``before`` (``unpublished``:
        and those never published, created before it), in one transaction; how many."""
        ...

    async def sweep_webhooks(self, before: dt.datetime, limit: int) -> int:
        """Delete at most ``limit`` webhook deliveries (and their attempts) that ended before
        ``before``, in one transaction; how many deliveries."""
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

    def on_retention(self, jobs: int, objects: int, raw_values: int, journal_rows: int) -> None:
        """A retention sweep purged these (imports, stored files, raw report values, journal
        rows)."""
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

    def on_retention(self, jobs: int, objects: int, raw_values: int, journal_rows: int) -> None:
        pass


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


# An object store over one local directory (the command line's files, read by path): the
# services take it from the edge, which passes the adapter's class.
LocalFiles = Callable[[Path], ObjectStore]


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


class WebhookStore(Protocol):
    """The completion webhooks' deliveries as the workers deliver them."""

    async def claim_due(self, limit: int, lease_s: float) -> list[DueDelivery]:
        """Lock up to ``limit`` due deliveries (skipping those another instance holds), count
        one more attempt of each (recorded as started) and push their next attempt ``lease_s``
        away (a crashed attempt is due again after it); commit."""
        ...

    async def job_document_body(self, delivery: DueDelivery, body: bytes) -> bytes:
        """Freeze ``body`` as the delivery's body unless one is already stored; the stored one."""
        ...

    async def job_view(self, job_id: uuid.UUID) -> JobView: ...

    async def record(
        self, delivery: DueDelivery, result: AttemptResult, outcome: Outcome, retry_in_s: float
    ) -> None:
        """Complete the attempt's record and move the delivery on (delivered, retry in
        ``retry_in_s``, gave up); nothing when another instance claimed it meanwhile."""
        ...

    async def wait_for_deliveries(self, timeout_s: float) -> None:
        """Return when an event may have been written since the last call, or after the timeout."""
        ...

    async def close(self) -> None: ...


class ClientWebhooks(Protocol):
    """The clients' webhook settings, as the owner sets them."""

    async def get(self, client_id: int) -> ClientWebhook | None: ...

    async def set(
        self, client_id: int, secret: str | None, notify_url: str | None, generated: str
    ) -> ClientWebhook:
        """Set the default target; ``secret`` replaces the secret (None keeps it, or stores
        ``generated`` for a client that had none)."""
        ...


class Resolver(Protocol):
    """A host's addresses (every one, IPv4 and IPv6), as text."""

    async def resolve(self, host: str, port: int) -> list[str]: ...


class WebhookSender(Protocol):
    """POSTs one webhook attempt; the receiver's status code (redirects are not followed)."""

    async def post(
        self,
        url: str,
        address: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
    ) -> int:
        """Connect to ``address`` (a checked address of the URL's host), present the URL's host
        (Host, TLS SNI and certificate), send; raise WebhookSendError on any failure."""
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


class JobStore(Protocol):
    """The API's jobs (:class:`importer.adapters.postgres.views.PostgresJobViews`)."""

    async def view_job(self, client_id: int, job_id: uuid.UUID) -> JobView: ...

    async def stored_job(self, client_id: int, job_id: uuid.UUID) -> Job:
        """The job as stored: what reading its file again needs (layout, format, seal)."""
        ...

    async def list_jobs(
        self,
        client_id: int,
        *,
        user_id: str | None,
        statuses: Sequence[JobStatus] | None,
        before: tuple[dt.datetime, uuid.UUID] | None,
        limit: int,
    ) -> list[JobView]: ...

    async def mark_uploaded(
        self,
        client_id: int,
        job_id: uuid.UUID,
        *,
        ok: bool,
        fail_reason: str | None,
        storage_version: str | None = None,
    ) -> JobView: ...

    async def start_job(
        self, client_id: int, job_id: uuid.UUID, operation_id: str | None
    ) -> JobView: ...

    async def request_cancel(self, client_id: int, job_id: uuid.UUID) -> JobView: ...

    async def apply_preview(
        self, client_id: int, job_id: uuid.UUID, operation_id: str | None
    ) -> JobView:
        """A preview resting in ``ready`` handed to the workers (refusals as
        ``lifecycle.apply_action``; an expired one is cancelled: PreviewExpiredError)."""
        ...

    def row_issues(self, job_id: uuid.UUID) -> AsyncIterator[RowIssue]: ...

    def duplicates(self, job_id: uuid.UUID) -> AsyncIterator[Competition]: ...


class CatalogStore(Protocol):
    """What the API adds to the store: job creation with its links, layouts, journeys."""

    async def create_linked_job(
        self, new_job: NewJob, status: JobStatus, intent: FiringIntent | None
    ) -> None:
        """Insert the job, its journey classification and its firing intent in one transaction."""
        ...

    async def journey_exists(self, client_id: int, journey_id: int) -> bool: ...

    async def client_webhook(self, client_id: int) -> ClientWebhook | None:
        """The client's webhook settings (secret, default notify_url), None when unset."""
        ...

    async def create_layout(
        self, client_id: int, name: str, document: Mapping[str, object]
    ) -> StoredLayout: ...

    async def get_layout(self, client_id: int, layout_id: int) -> StoredLayout: ...

    async def list_layouts(self, client_id: int) -> list[StoredLayout]: ...

    async def update_layout(
        self, client_id: int, layout_id: int, name: str, document: Mapping[str, object]
    ) -> StoredLayout: ...

    async def delete_layout(self, client_id: int, layout_id: int) -> None: ...


class ColumnStore(Protocol):
    """The columns step's tenant data: custom fields, the memory, a job's mapping."""

    async def custom_fields(self, client_id: int) -> tuple[CustomField, ...]: ...

    async def memory(self, client_id: int) -> list[MemoryEntry]: ...

    async def set_mapping(
        self,
        client_id: int,
        job_id: uuid.UUID,
        layout: Mapping[str, object],
        pairs: Sequence[tuple[str, str]],
    ) -> bool:
        """Store the mapping of a job not started yet; False when it has started (or is gone)."""
        ...

    async def clear_memory(self, client_id: int) -> int:
        """Forget every remembered header of the client; how many entries went."""
        ...


class Delivery(Protocol):
    """One delivery of a chunk message; exactly one of the four endings is called."""

    @property
    def body(self) -> bytes: ...

    @property
    def attempts(self) -> int:
        """Failed deliveries before this one (``x-death`` and the carried attempt header)."""
        ...

    async def ack(self) -> None: ...

    async def retry(self) -> None:
        """Reject into the retry queue: back after its TTL, one more attempt counted."""
        ...

    @property
    def deferrals(self) -> int:
        """Times this message was deferred for its lane before."""
        ...

    async def defer(self) -> None:
        """Out of the way for the lane wait, attempts unchanged (re-published, then acked)."""
        ...

    async def dead_letter(self, error: str) -> None:
        """To the dead-letter queue with ``error`` (confirmed), then acked."""
        ...


class BatchPublisher(Protocol):
    """The coordinator's side: publishes a batch of a job for any instance to apply."""

    async def publish(self, job: Job, batch: Batch) -> None: ...


class DeliveryHandler(Protocol):
    """What a chunk delivery is handed to (:class:`~importer.pipeline.fanout.ChunkHandler`)."""

    async def handle(self, delivery: Delivery) -> None: ...


class AdminStore(Protocol):
    """The owner's operations on the jobs; on PostgreSQL,
    :class:`importer.adapters.postgres.admin.PostgresAdmin`."""

    async def requeue_job(
        self, client_id: int | None, job_id: uuid.UUID, operation_id: str
    ) -> Requeued: ...

    async def remove_job_data(self, client_id: int | None, job_id: uuid.UUID) -> RemovedData: ...

    async def job_statuses(
        self, client_id: int | None, job_ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, tuple[int, JobStatus]]: ...


class UndoStore(Protocol):
    """An import's undo (:class:`importer.adapters.postgres.undo.PostgresUndo`)."""

    async def undo_client(self, client_id: int | None, job_id: uuid.UUID) -> int:
        """The job's client (``client_id`` None: the owner's command line, any client's)."""
        ...

    async def begin_undo(self, client_id: int | None, job_id: uuid.UUID) -> lifecycle.UndoStart:
        """Decide, check the conflicts (UndoConflictError), enter ``undoing``."""
        ...

    async def undo_slice(self, job_id: uuid.UUID) -> bool:
        """One slice in its own transaction; False once the undo ended ``undone``."""
        ...

    async def fail_undo(self, job_id: uuid.UUID, reason: str) -> None:
        """A step failed: the job ``failed`` with ``reason``, its lease released."""
        ...

    async def fail_stale_undos(self) -> int:
        """Fail the undos whose lease expired (their process stopped); how many."""
        ...


class JobReader(Protocol):
    """The API's job reads (``importer.ports.JobStore``) with ``client_id`` None: any client."""

    async def view_job(self, client_id: int | None, job_id: uuid.UUID) -> JobView: ...

    async def list_jobs(
        self,
        client_id: int | None,
        *,
        user_id: str | None,
        statuses: Sequence[JobStatus] | None,
        before: tuple[dt.datetime, uuid.UUID] | None,
        limit: int,
    ) -> list[JobView]: ...
