"""Applying one batch to the store: retries, the split down to a poison row, discards.

The same rules serve both modes of an import: the in-process run (one applier per run, retries
with backoff here) and the multi-instance consumer (one applier per delivery, in lane order;
a transient failure goes back to the broker's retry chain until the last delivery).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import structlog

from importer.core import failpoints, lifecycle
from importer.core.errors import (
    ContentRefusedError,
    LaneSplitError,
    StoreError,
    TransientStoreError,
)
from importer.core.models import Batch, Counters, Job, Reason
from importer.ports import NullObserver, PipelineObserver, Store

log = structlog.get_logger(__name__)


def failure_kind(exc: StoreError) -> lifecycle.FailureKind:
    if isinstance(exc, TransientStoreError):
        return lifecycle.FailureKind.TRANSIENT
    if isinstance(exc, ContentRefusedError):
        return lifecycle.FailureKind.CONTENT
    return lifecycle.FailureKind.OTHER


class BatchApplier:
    """Applies batches of one job (or pieces of them), each through ``lifecycle`` 's rules.

    A transient failure retries with backoff up to ``max_attempts``; then the piece is discarded,
    or, with ``give_up=False`` (a delivery that is not the last), the failure is raised for the
    broker to retry later. A content failure (the database refused a row) splits the piece and
    applies its halves in order, down to the poison row, which alone is rejected.

    ``done_parts``: the split pieces the ledger already holds, by (chunk_no, partition) — a
    resumed batch skips them. ``lane``: multi-instance mode, each batch in its lane's order
    (LaneNotReadyError propagates: the caller waits or hands the batch back).
    """

    def __init__(
        self,
        store: Store,
        job: Job,
        *,
        max_attempts: int,
        observer: PipelineObserver | None = None,
        done_parts: Mapping[tuple[int, int], frozenset[int]] | None = None,
        lane: bool = False,
        give_up: bool = True,
    ) -> None:
        self._store = store
        self._job = job
        self._max_attempts = max_attempts
        self._observer: PipelineObserver = observer or NullObserver()
        self._done_parts = dict(done_parts or {})
        self._lane = lane
        self._give_up = give_up
        self.discarded_error: str | None = None  # why the last piece given up was given up
        self.repeated = False  # the last batch was already in the ledger (or its lane passed it)

    async def apply(self, batch: Batch) -> Counters:
        done = self._done_parts.get((batch.chunk_no, batch.partition), frozenset())
        if batch.part in done:  # a piece a previous run committed
            return Counters()
        if lifecycle.split_on_resume(batch.part, done):
            return await self._apply_halves(batch)
        # job_id, client_id, chunk and partition come from the caller's log context.
        batch_log = log.bind(part=batch.part) if batch.part != 1 else log.bind()
        started = time.perf_counter()
        attempt = 0
        while True:
            attempt += 1
            try:
                counters = await self._store.apply_batch(self._job, batch, lane=self._lane)
            except LaneSplitError as exc:  # another delivery split it: go on piece by piece
                self._done_parts[(batch.chunk_no, batch.partition)] = exc.done_parts
                return await self._apply_halves(batch)
            except StoreError as exc:
                action = lifecycle.failure_action(
                    batch, attempt, self._max_attempts, failure_kind(exc)
                )
                if action is lifecycle.FailureAction.RETRY:
                    batch_log.warning("batch_retry", attempt=attempt, error=str(exc))
                    self._observer.on_batch_retry()
                    await asyncio.sleep(lifecycle.retry_delay(attempt))
                    continue
                if not self._give_up and isinstance(exc, TransientStoreError):
                    raise
                return await self._on_failure(batch, action, attempt, exc, batch_log)
            if failpoints.armed is not None:
                await failpoints.armed.reach(failpoints.AFTER_COMMIT)
            self.repeated = counters is None
            applied = counters if counters is not None else Counters()
            seconds = time.perf_counter() - started
            self._observer.on_batch_applied(applied, seconds, repeated=counters is None)
            batch_log.info(  # the canonical line of a batch
                "chunk_applied",
                rows=batch.rows_read,
                inserted=applied.inserted,
                updated=applied.updated,
                invalid=applied.invalid,
                ignored=applied.ignored,
                attempts=attempt,
                ms=round(seconds * 1000, 1),
                repeated=counters is None,
            )
            return applied

    async def _on_failure(
        self,
        batch: Batch,
        action: lifecycle.FailureAction,
        attempts: int,
        exc: Exception,
        batch_log: structlog.typing.FilteringBoundLogger,
    ) -> Counters:
        """Split, reject or discard a piece that failed for good."""
        if action is lifecycle.FailureAction.SPLIT:
            batch_log.warning("batch_split", rows=len(batch.rows), error=str(exc))
            self._observer.on_batch_split()
            return await self._apply_halves(batch)
        if action is lifecycle.FailureAction.REJECT:
            batch_log.warning("row_rejected", line=batch.rows[0].line, error=str(exc))
            reason = Reason.ROW_REJECTED
        else:
            batch_log.error("batch_discarded", attempts=attempts, error=str(exc))
            reason = Reason.CHUNK_DISCARDED
            self.discarded_error = str(exc)
        await self.discard(batch, attempts, str(exc), reason=reason)
        counters = lifecycle.discarded_counters(batch)
        self._observer.on_batch_discarded(counters, rejected=reason is Reason.ROW_REJECTED)
        return counters

    async def discard(
        self, batch: Batch, attempts: int, error: str, *, reason: Reason = Reason.CHUNK_DISCARDED
    ) -> None:
        await self._store.discard_batch(
            self._job, batch, attempts, error, reason=reason, lane=self._lane
        )

    async def _apply_halves(self, batch: Batch) -> Counters:
        """The halves one after the other: per key, rows keep file order. In a lane, the whole
        batch's lane moves on once all its pieces are in."""
        first, second = lifecycle.split_batch(batch)
        applied_first = await self.apply(first)
        counters = lifecycle.sum_counters((applied_first, await self.apply(second)))
        if self._lane and batch.part == 1:
            await self._store.advance_lane(self._job, batch)
        return counters
