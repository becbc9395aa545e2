"""Use cases shared by the command line and (later) the HTTP API."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import structlog

from importer.exceptions import (
    ChecksumMismatchError,
    ConfigurationError,
    FileRejectedError,
    ObjectNotFoundError,
)
from importer.models import ConflictStrategy, Counters, InputFormat, JobStatus, JobWarning, Reason
from importer.pipeline import ImportRun, PipelineConfig
from importer.ports import NewJob, ObjectStore, Progress, Source, Store, StoredObject, key_problem
from importer.settings import Settings
from importer.validate import Layout

log = structlog.get_logger("importer.service")


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


@dataclass(frozen=True, slots=True)
class ImportOutcome:
    job_id: uuid.UUID
    status: JobStatus
    counters: Counters
    fail_reason: str | None
    elapsed_s: float
    warnings: tuple[JobWarning, ...] = ()  # file-level warnings (suspect_encoding)

    @property
    def succeeded(self) -> bool:
        return self.status in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_PLACEHOLDERS)


class ObjectSource:
    """A stored upload as the pipeline's :class:`Source`, pinned to the bytes that were verified.

    Storage failures no retry can mend become file rejections, so the job ends ``failed`` with a
    reason: an object replaced since it was verified is a checksum mismatch, a vanished one is
    unreadable. Other storage errors (the service unreachable) propagate and stop the run
    unfinalized; the ledger lets a later run of the job skip the batches already applied.
    """

    def __init__(
        self,
        objects: ObjectStore,
        key: str,
        *,
        size: int | None,
        pinned: str | None,
        name: str | None = None,
    ) -> None:
        self._objects = objects
        self.key = key
        self.name = name or key.rpartition("/")[2]  # the pipeline spots ``.gz`` by name
        self.size = size
        self.pinned = pinned

    @classmethod
    async def verified(
        cls, objects: ObjectStore, key: str, size: int, sha256: str, name: str | None = None
    ) -> ObjectSource:
        """Check the stored bytes against the sealed size and sha256, and pin them.

        Raises the store's ChecksumMismatchError or ObjectNotFoundError: no job exists yet, so
        the caller (the API) answers the client itself.
        """
        pinned = await objects.verify(key, size, sha256)
        return cls(objects, key, size=size, pinned=pinned, name=name)

    async def blocks(self, block_size: int) -> AsyncIterator[bytes]:
        try:
            async for block in self._objects.blocks(self.key, block_size, pinned=self.pinned):
                yield block
        except ChecksumMismatchError as exc:
            raise FileRejectedError(Reason.CHECKSUM_MISMATCH, str(exc)) from exc
        except ObjectNotFoundError as exc:
            raise FileRejectedError(Reason.SOURCE_UNREADABLE, str(exc)) from exc


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


def rows_per_second(rows: int, seconds: float) -> float:
    """A run's rate, for its canonical line."""
    return round(rows / seconds, 1) if seconds > 0 else 0.0


def format_for(name: str) -> InputFormat:
    """The input format implied by a file name (``.jsonl``, ``.ndjson``, ``.xlsx``, optionally
    ``.gz``); CSV otherwise."""
    base = name.lower().removesuffix(".gz")
    if base.endswith((".jsonl", ".ndjson")):
        return InputFormat.JSONL
    if base.endswith(".xlsx"):
        return InputFormat.XLSX
    return InputFormat.CSV


async def import_source(
    store: Store,
    source: Source,
    request: ImportRequest,
    settings: Settings,
    progress: Progress | None = None,
    stop: asyncio.Event | None = None,
    *,
    sealed: StoredObject | None = None,
) -> ImportOutcome:
    """Create a job for ``source`` and run it to its end in this process; ``sealed``: the
    size and sha256 of the source's bytes, recorded on the job (an object the source is
    pinned to)."""
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
        source_size=None if sealed is None else sealed.size,
        source_sha256=None if sealed is None else sealed.sha256,
    )
    job = await store.create_job(new_job, JobStatus.QUEUED)
    config = PipelineConfig(
        limits=settings.limits,
        layout=request.layout,
        international=request.international,
        read_block_bytes=settings.read_block_bytes,
        queue_depth=settings.queue_depth,
        max_batch_attempts=settings.max_batch_attempts,
    )
    with structlog.contextvars.bound_contextvars(job_id=str(job.id), client_id=job.client_id):
        await ImportRun(job, source, store, config, progress, stop).run()
        job = await store.get_job(job.id)
        elapsed = time.perf_counter() - started
        log.info(  # the canonical line of a job
            "job_finished",
            status=job.status.value,
            elapsed_s=round(elapsed, 3),
            rows_read=job.counters.rows_read,
            inserted=job.counters.inserted,
            updated=job.counters.updated,
            invalid=job.counters.invalid,
            error=job.counters.error,
            ignored=job.counters.ignored,
            fail_reason=job.fail_reason,
            rows_per_s=rows_per_second(job.counters.rows_read, elapsed),
        )
    return ImportOutcome(
        job.id, job.status, job.counters, job.fail_reason, elapsed, warnings=job.warnings
    )
