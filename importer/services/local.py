"""The command line's use cases: import a local file or an S3 object here, resume a job."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from importer.core import preview
from importer.core.config import PipelineConfig
from importer.core.errors import (
    ChecksumMismatchError,
    ConfigurationError,
    FileRejectedError,
    ImporterError,
    LeaseLostError,
    ObjectNotFoundError,
)
from importer.core.layout import Layout
from importer.core.lifecycle import RunEnding
from importer.core.models import (
    TERMINAL_STATUSES,
    ConflictStrategy,
    Counters,
    InputFormat,
    Job,
    JobStatus,
    JobWarning,
    NewJob,
    Reason,
)
from importer.core.objects import StoredObject, key_problem
from importer.pipeline.run import ImportRun
from importer.ports import JobQueue, LocalFiles, ObjectStore, Progress, Source
from importer.services.leases import JobRun, end_run, lease_held, process_owner
from importer.services.runs import (
    ObjectSource,
    job_config,
    job_finished,
    local_file_source,
    pipeline_config,
)
from importer.settings import Settings

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ImportRequest:
    client_id: int
    strategy: ConflictStrategy
    input_format: InputFormat
    chunk_size: int
    concurrency: int
    layout: Layout | None = None
    layout_document: dict[str, object] | None = None
    user_id: str | None = None
    international: bool = False
    preview: bool = False  # a dry run: plan against the contacts, write none, rest in ready
    max_invalid: str | None = None  # the error threshold, canonical (core.threshold)
    duplicates_report: bool = True  # keep the duplicate report (core.duplicates)
    notify_url: str | None = None  # the completion webhook (None: the client's default, if any)


@dataclass(frozen=True, slots=True)
class ImportOutcome:
    job_id: uuid.UUID
    status: JobStatus
    counters: Counters
    fail_reason: str | None
    elapsed_s: float
    warnings: tuple[JobWarning, ...] = ()  # file-level warnings (suspect_encoding)
    # How this process's run ended: cancelled (its user's signal, or a cancel request), the lease
    # lost to another process, or finished (None: a run without a lease, the tests' own).
    ending: RunEnding | None = None
    preview: dict[str, object] | None = None  # a preview's document
    validation: dict[str, object] | None = None  # what validating the whole file found
    # An applied preview's import that ended with other counters than its preview showed
    # (None: no applied preview, or not ended).
    counters_differ: bool | None = None

    @property
    def succeeded(self) -> bool:
        """Completed, or (a dry run) planned and resting in ``ready``."""
        if self.status is JobStatus.READY:
            return self.preview is not None
        return self.status in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_PLACEHOLDERS)


S3_SCHEME = "s3://"


# S3's bucket naming rules (3-63 lowercase letters, digits, dots and hyphens, a letter or digit
# at both ends).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


@dataclass(frozen=True, slots=True)
class S3Location:
    """``s3://bucket/key``: an object the command line imports through the object store."""

    bucket: str
    key: str

    @property
    def url(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.key}"

    @property
    def name(self) -> str:
        """The source's name: the format and ``.gz`` are told by its end, like a path's."""
        return self.url


def parse_s3_url(text: str) -> S3Location:
    """``s3://bucket/key`` as a location; ConfigurationError saying what is wrong otherwise."""
    if not text.startswith(S3_SCHEME):
        raise ConfigurationError(f"{text[:80]!r} is not an s3://bucket/key URL")
    bucket, _, key = text.removeprefix(S3_SCHEME).partition("/")
    if not _BUCKET.fullmatch(bucket):
        raise ConfigurationError(f"{text[:80]!r}: {bucket[:64]!r} is not an S3 bucket name")
    problem = key_problem(key)
    if problem is not None:
        raise ConfigurationError(f"{text[:80]!r}: the object key {problem}")
    return S3Location(bucket, key)


@dataclass(frozen=True, slots=True)
class LocalFile:
    """A local file to import: its absolute path, its size and sha256 (sealed on the job) and a
    source pinned to those bytes (a file changed while it is read fails the job)."""

    path: Path
    sealed: StoredObject
    source: ObjectSource


async def seal_local_file(path: Path, local_files: LocalFiles) -> LocalFile:
    """Hash ``path`` (absolute: a later chdir must not move it) once: what to seal on its job,
    and its pinned source."""
    if not path.is_absolute():
        raise ValueError(f"not an absolute path: {path}")
    objects = local_files(path.parent)
    try:
        sealed, token = await objects.seal(path.name)
    except ObjectNotFoundError as exc:
        raise FileRejectedError(Reason.SOURCE_UNREADABLE, f"{path}: no such file") from exc
    source = ObjectSource(objects, path.name, size=sealed.size, pinned=token, name=path.name)
    return LocalFile(path, sealed, source)


async def import_source(
    store: JobQueue,
    source: Source,
    request: ImportRequest,
    settings: Settings,
    progress: Progress | None = None,
    stop: asyncio.Event | None = None,
    *,
    sealed: StoredObject | None = None,
    local_path: Path | None = None,
    announce: Callable[[uuid.UUID], None] | None = None,
) -> ImportOutcome:
    """Create a job for ``source`` and run it to its end in this process, under its lease.

    ``stop`` (the command line's SIGINT or SIGTERM) stops it between chunks: it ends
    ``cancelled`` with the ledger's counters, and ``importer job resume`` goes on from there.
    ``sealed``: the size and sha256 of the source's bytes (the source is pinned to them),
    recorded on the job; ``local_path``: a local file's absolute path, recorded too, so a resume
    finds and checks it. ``announce`` is told the job's id once the job exists (the CLI prints
    it: a killed import is resumed by it).
    """
    started = time.perf_counter()
    new_job = NewJob(
        id=uuid.uuid4(),
        client_id=request.client_id,
        user_id=request.user_id,
        source=source.name,
        input_format=request.input_format.value,
        strategy=request.strategy.value,
        chunk_size=request.chunk_size,
        partitions=request.concurrency,
        layout=request.layout_document,
        has_internationalization=request.international,
        bytes_total=source.size,
        in_process=True,
        lease_owner=process_owner("cli"),
        lease_s=settings.lease_seconds,
        source_size=None if sealed is None else sealed.size,
        source_sha256=None if sealed is None else sealed.sha256,
        local_path=str(local_path) if local_path is not None else None,
        preview=request.preview,
        max_invalid=request.max_invalid,
        duplicates_report=request.duplicates_report,
        journaled=settings.undo_journal,
        notify_url=request.notify_url,
    )
    job = await store.create_job(new_job, JobStatus.QUEUED)
    if announce is not None:
        announce(job.id)
    log.info("import_created", job_id=str(job.id), local_path=new_job.local_path)
    config = pipeline_config(settings, request.layout, request.international)
    return await run_here(store, job, source, config, settings, progress, stop, started)


async def resume_job(
    store: JobQueue,
    objects_for: Callable[[Job], ObjectStore],
    job_id: uuid.UUID,
    settings: Settings,
    progress: Progress | None = None,
    stop: asyncio.Event | None = None,
    *,
    local_files: LocalFiles,
) -> ImportOutcome:
    """``importer job resume``: run a cancelled, failed or abandoned job on in this process,
    from its checkpoint, to its end (or to the next interruption, as :func:`import_source`).

    The file is checked first (a command-line import's: its sealed path, size and sha256; an
    upload's: the stored object), then the job is taken over (``take_over_job``): an ended
    job starts its next run, an abandoned one goes on with its run. The ledger's done batches
    are skipped, so the job ends with the counters and contacts of an undisturbed run.
    """
    started = time.perf_counter()
    job = await store.get_job(job_id)
    source = await _resume_source(job, objects_for(job), local_files)
    config = job_config(settings, job)
    owner = process_owner("cli")
    job = await store.take_over_job(job_id, owner, settings.lease_seconds, f"resume:{owner}")
    log.info("import_taken_over", job_id=str(job.id), status=job.status.value)
    return await run_here(store, job, source, config, settings, progress, stop, started)


async def apply_job(
    store: JobQueue,
    objects_for: Callable[[Job], ObjectStore],
    job_id: uuid.UUID,
    settings: Settings,
    progress: Progress | None = None,
    stop: asyncio.Event | None = None,
    *,
    local_files: LocalFiles,
) -> ImportOutcome:
    """``importer job apply``: import a preview resting in ``ready`` in this process, planned
    again against the contacts as they are now (like :func:`resume_job`, its file checked
    first). A job that is no resting preview is refused (``lifecycle.apply_action``); an
    expired one is cancelled and refused."""
    started = time.perf_counter()
    job = await store.get_job(job_id)
    source = await _resume_source(job, objects_for(job), local_files)
    config = job_config(settings, job)
    owner = process_owner("cli")
    await store.apply_preview(job_id, f"apply:{owner}")  # or raises why it cannot be applied
    # A worker may claim an upload's preview once applied: then the take-over is refused (its
    # lease is live) and the worker imports it.
    job = await store.take_over_job(job_id, owner, settings.lease_seconds, f"apply:{owner}")
    log.info("preview_applied", job_id=str(job.id))
    return await run_here(store, job, source, config, settings, progress, stop, started)


async def sealed_source(
    job: Job, objects: ObjectStore, local_files: LocalFiles | None
) -> ObjectSource:
    """The job's file, checked against its seal (a command line's local file, an upload, a
    command line's object); raises ObjectNotFoundError (also for a local file without
    ``local_files``: not readable where this runs) or ChecksumMismatchError."""
    if job.local_path is not None:
        if local_files is None:
            raise ObjectNotFoundError(f"{job.local_path}: a command line's file, not readable here")
        return await local_file_source(job, local_files)
    return await _stored_source(job, objects)


async def _resume_source(job: Job, objects: ObjectStore, local_files: LocalFiles) -> ObjectSource:
    """The job's file as sealed, or a refusal saying what differs."""
    where = job.local_path or job.source
    try:
        return await sealed_source(job, objects, local_files)
    except ObjectNotFoundError:
        raise ImporterError(f"import {job.id}: its file {where} is not there") from None
    except ChecksumMismatchError as exc:
        raise ImporterError(
            f"import {job.id}: {where} is not the file it imported ({exc})"
        ) from None


async def _stored_source(job: Job, objects: ObjectStore) -> ObjectSource:
    """An upload's stored file, verified against the size and sha256 sealed on the job."""
    if job.source_size is None or job.source_sha256 is None:
        raise ChecksumMismatchError("no size and sha256 were sealed on it")
    if job.source.startswith(S3_SCHEME):  # a command-line import of an object
        location = parse_s3_url(job.source)
        return await ObjectSource.verified(
            objects, location.key, job.source_size, job.source_sha256, location.name
        )
    return await ObjectSource.verified(
        objects, job.source, job.source_size, job.source_sha256, job.filename or None
    )


async def run_here(
    store: JobQueue,
    job: Job,
    source: Source,
    config: PipelineConfig,
    settings: Settings,
    progress: Progress | None,
    stop: asyncio.Event | None,
    started: float,
) -> ImportOutcome:
    """Run ``job``, leased to this process (``job.lease_owner``), under its heartbeat, then end
    it as a worker would (``leases.end_run``): stopped by ``stop``, it is finalized
    ``cancelled``. A failing service (the database, the file) propagates: the lease is left to
    expire, and the job is abandoned (resumable)."""
    owner = job.lease_owner
    assert owner is not None, "a job run here is leased to this process"
    job_run = JobRun(cancel_requested=job.cancel_requested)
    with structlog.contextvars.bound_contextvars(job_id=str(job.id), client_id=job.client_id):
        async with lease_held(store, job.id, owner, settings.lease_seconds, job_run):
            finalized = None
            if not job_run.cancel_requested:
                run = ImportRun(job, source, store, config, progress, job_run.stop)
                job_run.counters = run.state.counters
                async with _cancelled_by(stop, job_run):
                    try:
                        finalized = await run.run()
                    except LeaseLostError:
                        job_run.lease_lost = True
        ending = job_run.ending(finalized)
        await end_run(store, job.id, owner, ending, finalized)
        job = await store.get_job(job.id)
        elapsed = time.perf_counter() - started
        job_finished(
            log,
            ending,
            job.status,
            job.counters,
            elapsed,
            job_run.counters.rows_read,
            job.fail_reason,
        )
    return ImportOutcome(
        job.id,
        job.status,
        job.counters,
        job.fail_reason,
        elapsed,
        warnings=job.warnings,
        ending=ending,
        preview=job.preview,
        validation=job.validation,
        counters_differ=preview.counters_differ(
            job.preview,
            job.counters,
            applied=job.preview_applied,
            ended=job.status in TERMINAL_STATUSES,
        ),
    )


@contextlib.asynccontextmanager
async def _cancelled_by(stop: asyncio.Event | None, job_run: JobRun) -> AsyncIterator[None]:
    """While the block runs, ``stop`` (the user's signal) cancels the run (a named task)."""
    if stop is None:
        yield
        return

    async def cancel_on_stop() -> None:
        await stop.wait()
        job_run.cancel()

    watcher = asyncio.create_task(cancel_on_stop(), name="interrupt")
    try:
        yield
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
