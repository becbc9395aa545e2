"""Multi-instance imports (``RABBITMQ_URL`` set): what a chunk message's delivery does.

The worker holding an import's lease (the coordinator) reads the file and publishes every batch
(``codec``); every running instance consumes them. Batches of one key partition apply in chunk
order wherever they land — a lane per partition in PostgreSQL (``Store.apply_batch(lane=True)``)
— so the result is the one-instance result, whatever the instances, deliveries or crashes.

A delivery ends in exactly one of these, decided by :meth:`ChunkHandler.handle`:

* applied (or already applied: a duplicate) → ack; but a repeat of a batch given up earlier goes
  to the dead-letter queue again (the process that gave it up may have died before its copy got
  there: at least once, under the same message id);
* not its turn yet (an earlier chunk of its lane is missing) → waits a moment in its slot (the
  first time only: usually the missing chunk is being applied right then), then is deferred —
  re-published to the wait queue with its attempt count, acked, and back in the main queue
  after the wait — so no consumer slot is held for long and the missing chunk, even one coming
  back from the retry chain, finds a consumer at once;
* a transient failure (connection, lock, statement time-out) → rejected into the retry queue
  (TTL) and back, counted from ``x-death``; on the last allowed delivery the batch is recorded
  as discarded (its rows count as ``error``), the message goes to the dead-letter queue, acked;
* the database refused a row → split down to it (``BatchApplier``), the rest lands;
* stale (its publisher no longer holds the lease, or the import ended) → acked and dropped: the
  lease holder re-publishes whatever its ledger lacks;
* unparseable, or naming an unknown import → straight to the dead-letter queue.

No broker driver here: deliveries come through the :class:`Delivery` port.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import structlog

from importer.core import codec, failpoints
from importer.core.errors import (
    JobNotFoundError,
    LaneNotReadyError,
    LeaseLostError,
    MalformedMessageError,
    TransientStoreError,
)
from importer.core.models import TERMINAL_STATUSES, Batch, Job, Limits
from importer.pipeline.applier import BatchApplier
from importer.ports import Delivery, NullObserver, PipelineObserver, Store

log = structlog.get_logger(__name__)


# Deliveries of a batch before it is given up: the first and three retries (SPEC).
DEFAULT_MAX_RETRIES = 3


# How long a first delivery waits in its slot for its lane before it is deferred.
DEFAULT_LANE_WAIT_S = 0.5


_LANE_POLL_S = (0.005, 0.01, 0.02, 0.05, 0.1)


_JOB_CACHE = 256


@dataclass(frozen=True, slots=True)
class FanoutSettings:
    max_retries: int = DEFAULT_MAX_RETRIES
    lane_wait_s: float = DEFAULT_LANE_WAIT_S
    # The compiled codec where it is built (Settings.compiled); texts within the limits.
    compiled: bool = True
    limits: Limits = field(default_factory=Limits)


class ChunkHandler:
    """Handles chunk deliveries for one instance (any number at once, one event loop)."""

    def __init__(
        self,
        store: Store,
        settings: FanoutSettings | None = None,
        observer: PipelineObserver | None = None,
    ) -> None:
        self._store = store
        self._settings = settings or FanoutSettings()
        self._decode = codec.implementation(self._settings.compiled).decode
        self._observer: PipelineObserver = observer or NullObserver()
        self._jobs: OrderedDict[uuid.UUID, Job] = OrderedDict()
        self._known_fields: set[tuple[int, str]] = set()

    async def handle(self, delivery: Delivery) -> None:
        """Apply the delivered batch, or route the message; never raises for its content."""
        try:
            message = self._decode(delivery.body, self._settings.limits)
        except MalformedMessageError as exc:
            await _dead_letter(delivery, "chunk_message_malformed", f"malformed: {exc}")
            return
        with structlog.contextvars.bound_contextvars(
            job_id=str(message.job_id),
            chunk=message.batch.chunk_no,
            partition=message.batch.partition,
        ):
            await self._handle(delivery, message)

    async def _handle(self, delivery: Delivery, message: codec.BatchMessage) -> None:
        try:
            job = await self._job(message.job_id)
        except JobNotFoundError:
            await _dead_letter(
                delivery, "chunk_message_unknown_import", f"unknown import {message.job_id}"
            )
            return
        if job.status in TERMINAL_STATUSES:
            await self._late(delivery, job, message.batch)
            return
        # Every write is fenced by the lease of the coordinator that published the batch.
        job = replace(job, lease_owner=message.owner)
        give_up = delivery.attempts >= self._settings.max_retries
        applier = BatchApplier(
            self._store, job, max_attempts=1, observer=self._observer, lane=True, give_up=give_up
        )
        try:
            await self._ensure_fields(job, message)
            wait_s = self._settings.lane_wait_s if delivery.deferrals == 0 else 0.0
            applied = await self._apply_in_turn(applier, message.batch, wait_s)
            # A repeat of a batch given up earlier: the process that gave it up may have died
            # (or lost the broker) before its copy reached the dead-letter queue. Send it again
            # (at least once there; the message id is stable).
            given_up = (
                await self._store.given_up_error(job.id, message.batch)
                if applied and applier.repeated
                else None
            )
        except LeaseLostError as exc:
            log.info("chunk_message_stale", error=str(exc))
            await delivery.ack()
            return
        except LaneNotReadyError as exc:  # the import was not opened for lanes: never will be
            await _dead_letter(delivery, "chunk_message_without_lanes", str(exc))
            return
        except TransientStoreError as exc:
            await self._retry(delivery, exc)
            return
        if not applied:
            log.info("chunk_deferred", deferrals=delivery.deferrals + 1)
            await delivery.defer()
        elif applier.discarded_error is not None:
            if failpoints.armed is not None:
                await failpoints.armed.reach(failpoints.BEFORE_DEAD_LETTER)
            await _dead_letter(delivery, "chunk_dead_lettered", applier.discarded_error)
        elif given_up is not None:
            await _dead_letter(delivery, "chunk_dead_lettered_again", given_up)
        else:
            await delivery.ack()

    async def _late(self, delivery: Delivery, job: Job, batch: Batch) -> None:
        """A message of a finished import: acked, unless its batch was given up (its copy may
        never have reached the dead-letter queue: sent again)."""
        try:
            given_up = await self._store.given_up_error(job.id, batch)
        except TransientStoreError as exc:
            await self._retry(delivery, exc)
            return
        if given_up is not None:
            await _dead_letter(delivery, "chunk_dead_lettered_again", given_up)
        else:
            log.info("chunk_message_late", status=job.status.value)
            await delivery.ack()

    async def _retry(self, delivery: Delivery, exc: TransientStoreError) -> None:
        log.warning("chunk_retry", attempts=delivery.attempts + 1, error=str(exc))
        self._observer.on_batch_retry()
        await delivery.retry()

    async def _apply_in_turn(self, applier: BatchApplier, batch: Batch, wait_s: float) -> bool:
        """Apply once the batch's lane reaches it; False if it did not within the wait."""
        deadline = time.monotonic() + wait_s
        pauses = iter(_LANE_POLL_S)
        while True:
            try:
                await applier.apply(batch)
            except LaneNotReadyError as exc:
                if exc.position is None:
                    raise
                pause = next(pauses, _LANE_POLL_S[-1])
                if time.monotonic() + pause > deadline:
                    return False
                await asyncio.sleep(pause)
            else:
                return True

    async def _job(self, job_id: uuid.UUID) -> Job:
        """The job, cached; a cached one that had ended is read again (a requeue runs it anew).
        The cached status is only a shortcut: every write is fenced in the database."""
        job = self._jobs.get(job_id)
        if job is None or job.status in TERMINAL_STATUSES:
            job = await self._store.get_job(job_id)
            self._jobs[job_id] = job
            if len(self._jobs) > _JOB_CACHE:
                self._jobs.popitem(last=False)
        return job

    async def _ensure_fields(self, job: Job, message: codec.BatchMessage) -> None:
        """Learn the ids of the batch's custom fields (the coordinator created them)."""
        names = message.field_names()
        missing = [n for n in names if (job.client_id, n.lower()) not in self._known_fields]
        if missing:
            await self._store.ensure_custom_fields(job, missing)
            self._known_fields.update((job.client_id, n.lower()) for n in missing)


async def _dead_letter(delivery: Delivery, event: str, error: str) -> None:
    log.error(event, error=error, attempts=delivery.attempts + 1)
    await delivery.dead_letter(error)
