"""Job workers: claim an import under a lease, run its pipeline, end it; until told to stop.

A worker claims the oldest claimable job (:meth:`JobQueue.claim_job`: a queued one, or one left
by a worker whose lease expired), verifies the stored file against the size and sha256 sealed
on the job, and runs its :class:`~importer.pipeline.run.ImportRun` with the job's own chunk size,
partitions and layout. A named heartbeat task (``importer.services.leases``, shared with the command
line's imports) renews the lease every third of it (at least every 2 s); when the lease is
lost or a cancel is requested it sets the run's stop event, and the run returns between chunks
once its in-flight batches are applied. Then
(``lifecycle.run_ending``):

* finished — the run finalized the job;
* lease lost — another worker owns the job: nothing more is written (the store fences it);
* cancelled — finalized ``cancelled`` with the ledger's counters;
* interrupted — the database, the object store or the broker failed: the lease is left to
  expire, so the
  job is retried (resumed) by the next claim after it, not in a hot loop;
* released — the worker is stopping: the lease is released and the next claim resumes the job,
  skipping the batches its ledger marks done.

Setting ``stop`` makes the worker claim nothing more and drain its running jobs. Every task is
named and awaited; an unexpected error in a job fails that job (``internal_error``), and a job
task that still dies stops the worker, which drains the others and re-raises. No driver is
imported here: the worker talks to the ``JobQueue`` and ``ObjectStore`` ports.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import time
import uuid
from collections.abc import Callable

import structlog

from importer.core import failpoints
from importer.core.errors import (
    BrokerError,
    ChecksumMismatchError,
    LayoutError,
    LeaseLostError,
    ObjectNotFoundError,
    StorageError,
    StoreError,
    TransientStoreError,
)
from importer.core.models import Finalized, Job, JobStatus, Reason
from importer.pipeline.run import ImportRun
from importer.ports import (
    BatchPublisher,
    JobQueue,
    LocalFiles,
    NullObserver,
    ObjectStore,
    PipelineObserver,
    Throttle,
)
from importer.services import maintenance
from importer.services.leases import JobRun, end_run, lease_held
from importer.services.runs import ObjectSource, job_config, job_finished, local_file_source
from importer.settings import Settings

log = structlog.get_logger(__name__)


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


PREVIEW_EXPIRY_EVERY_S = 60.0  # the default interval of a worker's sweep of expired previews
RETENTION_EVERY_S = 3600.0  # the default interval of a worker's retention sweep


class Worker:
    """Runs up to ``max_jobs`` imports at a time, each under a lease held by ``owner``.

    ``burst``: return once nothing is claimable and no job runs (tests, one-off drains).
    ``preview_expiry_every_s``: how often, at most, it cancels the previews nobody applied in
    time (on its claims: the first claim sweeps).
    """

    def __init__(
        self,
        store: JobQueue,
        objects: ObjectStore,
        settings: Settings,
        *,
        owner: str,
        stop: asyncio.Event,
        max_jobs: int = 1,
        burst: bool = False,
        throttle: Throttle | None = None,
        observer: PipelineObserver | None = None,
        publisher: BatchPublisher | None = None,
        local_files: LocalFiles,
        preview_expiry_every_s: float = PREVIEW_EXPIRY_EVERY_S,
        retention_every_s: float = RETENTION_EVERY_S,
        clock: Callable[[], dt.datetime] = _utc_now,
    ) -> None:
        self.owner = owner
        self._local_files = local_files  # a command-line import requeued to the workers
        self._publisher = publisher  # multi-instance mode: batches go to the broker
        self._observer: PipelineObserver = observer or NullObserver()
        self._throttle = throttle
        self._store = store
        self._objects = objects
        self._settings = settings
        self._stop = stop
        self._max_jobs = max_jobs
        self._burst = burst
        self._runs: dict[uuid.UUID, JobRun] = {}
        self._expiry_every_s = preview_expiry_every_s
        self._next_expiry = 0.0  # monotonic time of the next sweep of expired previews
        self._retention_every_s = retention_every_s
        self._next_retention = 0.0  # monotonic time of the next retention sweep
        self._clock = clock  # the retention's "now" (tests inject one)

    async def run(self) -> None:
        """Claim and run jobs until ``stop`` is set; then let the running ones drain."""
        jobs: set[asyncio.Task[None]] = set()
        log.info("worker_started", owner=self.owner, max_jobs=self._max_jobs)
        try:
            while not self._stop.is_set():
                job = await self._claim() if len(jobs) < self._max_jobs else None
                if job is not None:
                    jobs.add(asyncio.create_task(self._run_job(job), name=f"job:{job.id}"))
                    continue
                if self._burst and not jobs:
                    return
                await self._wait(jobs)
                _reap(jobs)
        finally:
            await self._drain(jobs)
            log.info("worker_stopped", owner=self.owner)

    async def _claim(self) -> Job | None:
        try:
            await self._expire_previews()
            await self.sweep_retention()
            job = await self._store.claim_job(
                self.owner, self._settings.lease_seconds, self._settings.max_imports_per_client
            )
            if job is not None and failpoints.armed is not None:
                await failpoints.armed.reach(failpoints.AFTER_CLAIM)
        except TransientStoreError as exc:  # the database is away: wait a poll, try again
            log.warning("claim_failed", owner=self.owner, error=str(exc))
            return None
        return job

    async def _expire_previews(self) -> None:
        """At most once every ``preview_expiry_every_s`` (a minute): cancel the previews nobody
        applied in time, and fail the undos whose process stopped (their lease expired)."""
        now = time.monotonic()
        if now < self._next_expiry:
            return
        self._next_expiry = now + self._expiry_every_s
        await self._store.expire_previews()
        await self._store.fail_stale_undos()

    async def sweep_retention(self, *, force: bool = False) -> None:
        """At most once every ``retention_every_s`` (an hour): the retention sweep
        (:func:`importer.services.maintenance.sweep_retention`: the imports past
        ``retention_days``, the outbox, the webhook deliveries). One log line per sweep."""
        now = time.monotonic()
        if now < self._next_retention and not force:
            return
        self._next_retention = now + self._retention_every_s
        swept = maintenance.Swept()
        try:
            swept = await maintenance.sweep_retention(
                self._store, self._objects, self._settings, self._clock()
            )
        except (StorageError, StoreError) as exc:  # away: the next sweep goes on
            log.warning("retention_failed", owner=self.owner, error=str(exc)[:200])
        self._observer.on_retention(swept.jobs, swept.objects, swept.raw_values, swept.journal_rows)
        log.info("retention_swept", owner=self.owner, **dataclasses.asdict(swept))

    async def _wait(self, jobs: set[asyncio.Task[None]]) -> None:
        """Until ``stop``, a job's end or, with a free slot, a queued job or the poll interval."""
        waiters = [asyncio.create_task(_until(self._stop), name=f"stop:{self.owner}")]
        if len(jobs) < self._max_jobs:
            waiters.append(asyncio.create_task(self._next_wake(), name=f"wake:{self.owner}"))
        try:
            await asyncio.wait([*waiters, *jobs], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()  # a pending wait: nothing to drain
            results = await asyncio.gather(*waiters, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                raise result

    async def _next_wake(self) -> None:
        poll = self._settings.worker_poll_seconds
        try:
            await self._store.wait_for_jobs(poll)
        except TransientStoreError as exc:  # back off: the database is unreachable
            log.warning("listen_failed", owner=self.owner, error=str(exc))
            await asyncio.sleep(poll)

    async def _drain(self, jobs: set[asyncio.Task[None]]) -> None:
        """Stop every running job between chunks and wait for each to end (releasing its lease)."""
        for job_run in self._runs.values():
            job_run.stop.set()
        results = await asyncio.gather(*jobs, return_exceptions=True)
        for task, result in zip(jobs, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                log.error("job_task_died", task=task.get_name(), error=repr(result))

    # --- one job ------------------------------------------------------------------------------

    async def _run_job(self, job: Job) -> None:
        """Run one claimed job, observed, with ``job_id`` and ``client_id`` bound in the context.

        The binding is this job task's alone (tasks copy the context: the heartbeat's and the
        pipeline's lines carry it too) and is reset when the job ends.
        """
        with structlog.contextvars.bound_contextvars(job_id=str(job.id), client_id=job.client_id):
            started = time.perf_counter()
            status: JobStatus | None = None
            self._observer.on_job_started(job.client_id)
            try:
                status = await self._run_claimed(job, started)
            finally:
                seconds = time.perf_counter() - started
                self._observer.on_job_finished(job.client_id, status, seconds)

    async def _run_claimed(self, job: Job, started: float) -> JobStatus | None:
        """Run the job with its heartbeat, then end it; one log line each way. Returns the
        job's terminal status, or None when it was left to a later run."""
        job_log = log.bind(owner=self.owner)
        job_log.info(
            "job_claimed", status=job.status.value, resumed=job.status is not JobStatus.QUEUED
        )
        job_run = JobRun(cancel_requested=job.cancel_requested)
        self._runs[job.id] = job_run
        lease_s = self._settings.lease_seconds
        try:
            async with lease_held(self._store, job.id, self.owner, lease_s, job_run):
                finalized = await self._attempt(job, job_run, job_log)
        finally:
            del self._runs[job.id]
        ending = job_run.ending(finalized)
        ended = await end_run(self._store, job.id, self.owner, ending, finalized)
        finalized = ended or finalized
        counters = finalized.counters if finalized is not None else job_run.counters
        status = finalized.status if finalized is not None else None
        seconds = time.perf_counter() - started
        job_finished(job_log, ending, status, counters, seconds, job_run.counters.rows_read)
        return status

    async def _attempt(
        self, job: Job, job_run: JobRun, job_log: structlog.typing.FilteringBoundLogger
    ) -> Finalized | None:
        """Run the job; the errors a run may meet end here, recorded on ``job_run``."""
        if job_run.cancel_requested:
            return None  # cancelled while no worker ran it: nothing to run
        try:
            return await self._execute(job, job_run)
        except LeaseLostError:
            job_run.lease_lost = True
        except (TransientStoreError, StorageError, BrokerError) as exc:
            job_log.warning("job_interrupted", error=str(exc))
            job_run.interrupted = True
        except Exception:  # noqa: BLE001 (a bug in one job fails that job, not the worker)
            job_log.exception("job_crashed")
            return await self._fail(job, job_run, Reason.INTERNAL_ERROR)
        return None

    async def _execute(self, job: Job, job_run: JobRun) -> Finalized | None:
        """The job's pipeline; a file or a layout that cannot be used fails the job."""
        try:
            source = await self._source(job)
            config = job_config(self._settings, job)
        except ChecksumMismatchError:
            return await self._fail(job, job_run, Reason.CHECKSUM_MISMATCH)
        except ObjectNotFoundError:
            return await self._fail(job, job_run, Reason.SOURCE_UNREADABLE)
        except LayoutError:
            return await self._fail(job, job_run, Reason.INVALID_LAYOUT)
        run = ImportRun(
            job,
            source,
            self._store,
            config,
            stop=job_run.stop,
            throttle=self._throttle,
            observer=self._observer,
            publisher=self._publisher,
        )
        job_run.counters = run.state.counters
        return await run.run()

    async def _source(self, job: Job) -> ObjectSource:
        """The stored file, verified against the sealed size and sha256 and pinned to them.

        A job created without sealed values (none is, through the API) is read unpinned. A
        command-line import handed to the workers (``importer job requeue``) is read from its
        local path, on this machine, against the same sealed values.
        """
        if job.local_path is not None:
            return await local_file_source(job, self._local_files)
        name = job.filename or None
        if job.source_size is None or job.source_sha256 is None:
            return ObjectSource(
                self._objects, job.source, size=job.source_size, pinned=None, name=name
            )
        return await ObjectSource.verified(
            self._objects, job.source, job.source_size, job.source_sha256, name=name
        )

    async def _fail(self, job: Job, job_run: JobRun, reason: Reason) -> Finalized | None:
        """Finalize the job ``failed`` (fenced by the lease)."""
        try:
            return await self._store.finalize(job.id, reason.value, owner=self.owner)
        except LeaseLostError:
            job_run.lease_lost = True
        except TransientStoreError:
            job_run.interrupted = True
        return None


def _reap(jobs: set[asyncio.Task[None]]) -> None:
    """Forget the ended job tasks; one that died (a bug: jobs end their own errors) re-raises."""
    for task in [t for t in jobs if t.done()]:
        jobs.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error


async def _until(event: asyncio.Event) -> None:
    await event.wait()
