"""A job's run under a lease, for the workers and the command line alike.

Whoever runs a job (a worker that claimed it, ``importer import``, ``importer job resume``)
holds its lease: a named heartbeat task renews it every third of it (at least every 2 s), and
sets the run's stop event when the lease is lost or a cancel is requested; the run returns
between chunks once its in-flight batches are applied. Then :func:`end_run` ends the job as
``lifecycle.run_ending`` decides: finalized ``cancelled`` with the ledger's counters after a
cancel, the lease released unless it is lost or left to expire (an interrupted run).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import structlog

from importer.core import lifecycle
from importer.core.errors import LeaseLostError, TransientStoreError
from importer.core.lifecycle import RunEnding
from importer.core.models import Counters, Finalized
from importer.ports import JobQueue

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class JobRun:
    """One job's run as its tasks see it (one event loop: no locks needed)."""

    stop: asyncio.Event = field(default_factory=asyncio.Event)  # the pipeline's stop event
    cancel_requested: bool = False
    lease_lost: bool = False
    interrupted: bool = False
    counters: Counters = field(default_factory=Counters)  # this run's batches (live)

    def cancel(self) -> None:
        """Stop between chunks and end the job ``cancelled`` (a cancel, or the CLI's user)."""
        self.cancel_requested = True
        self.stop.set()

    def ending(self, finalized: Finalized | None) -> RunEnding:
        return lifecycle.run_ending(
            finished=finalized is not None,
            lease_lost=self.lease_lost,
            cancel_requested=self.cancel_requested,
            interrupted=self.interrupted,
        )


@contextlib.asynccontextmanager
async def lease_held(
    store: JobQueue, job_id: uuid.UUID, owner: str, lease_s: float, job_run: JobRun
) -> AsyncIterator[JobRun]:
    """The heartbeat runs (a named task) while the block runs; stopped and awaited after it."""
    heartbeat = asyncio.create_task(
        _heartbeat(store, job_id, owner, lease_s, job_run), name=f"lease:{job_id}"
    )
    try:
        yield job_run
    finally:
        job_run.stop.set()
        await heartbeat


async def _heartbeat(
    store: JobQueue, job_id: uuid.UUID, owner: str, lease_s: float, job_run: JobRun
) -> None:
    """Renew the lease every third of it (at most 2 s apart); stop the run when it is lost or a
    cancel comes.

    A failed renewal is retried at the next beat: the fenced writes keep the job safe
    meanwhile, whoever holds it.
    """
    interval = lifecycle.heartbeat_interval(lease_s)
    while not await set_within(job_run.stop, interval):
        try:
            state = await store.renew_lease(job_id, owner, lease_s)
        except TransientStoreError as exc:
            log.warning("lease_renewal_failed", job_id=str(job_id), error=str(exc))
            continue
        job_run.cancel_requested = job_run.cancel_requested or state.cancel_requested
        job_run.lease_lost = not state.held
        if job_run.lease_lost or job_run.cancel_requested:
            job_run.stop.set()


async def end_run(
    store: JobQueue,
    job_id: uuid.UUID,
    owner: str,
    ending: RunEnding,
    finalized: Finalized | None,
) -> Finalized | None:
    """Finalize a cancelled job; release the lease unless it is lost or left to expire."""
    try:
        if ending is RunEnding.CANCELLED:
            finalized = await store.finalize(job_id, None, cancelled=True, owner=owner)
        if ending in (RunEnding.FINISHED, RunEnding.CANCELLED, RunEnding.RELEASED):
            await store.release_lease(job_id, owner)
    except (LeaseLostError, TransientStoreError) as exc:  # the lease expires on its own
        log.warning("job_end_failed", job_id=str(job_id), ending=ending.value, error=str(exc))
    return finalized


async def set_within(event: asyncio.Event, timeout_s: float) -> bool:
    """Whether ``event`` is set within ``timeout_s``."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)
    return event.is_set()


def process_owner(role: str) -> str:
    """A lease owner unique to this holder: host, process, role, and a random part (a
    container's pid is the same after every restart)."""
    return f"{socket.gethostname()}:{os.getpid()}:{role}:{uuid.uuid4().hex[:8]}"
