"""What any run of a job needs, worker or command line: its source and its pipeline config."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import structlog

from importer.core.config import PipelineConfig
from importer.core.errors import (
    ChecksumMismatchError,
    FileRejectedError,
    ObjectNotFoundError,
)
from importer.core.layout import Layout, parse_layout
from importer.core.lifecycle import RunEnding
from importer.core.models import (
    Counters,
    InputFormat,
    Job,
    JobStatus,
    Reason,
)
from importer.ports import LocalFiles, ObjectStore
from importer.settings import Settings


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


async def local_file_source(job: Job, local_files: LocalFiles) -> ObjectSource:
    """A command-line import's file, checked against what its job sealed: the same path, size and
    sha256. Raises ObjectNotFoundError or ChecksumMismatchError (the worker fails the job for
    them; ``importer job resume`` refuses)."""
    if job.local_path is None or job.source_size is None or job.source_sha256 is None:
        raise ChecksumMismatchError(f"import {job.id}: no local file was sealed on it")
    path = Path(job.local_path)
    return await ObjectSource.verified(
        local_files(path.parent), path.name, job.source_size, job.source_sha256, path.name
    )


def pipeline_config(
    settings: Settings, layout: Layout | None, international: bool
) -> PipelineConfig:
    return PipelineConfig(
        limits=settings.limits,
        layout=layout,
        international=international,
        read_block_bytes=settings.read_block_bytes,
        queue_depth=settings.queue_depth,
        max_batch_attempts=settings.max_batch_attempts,
        compiled=settings.compiled,
        preview_ttl_s=settings.preview_ttl_seconds,
    )


def job_config(settings: Settings, job: Job) -> PipelineConfig:
    """The pipeline of a stored job: its own layout and phone rule (raises LayoutError)."""
    layout = parse_layout(job.layout) if job.layout is not None else None
    return pipeline_config(settings, layout, job.has_internationalization)


def job_finished(
    logger: structlog.typing.FilteringBoundLogger,
    ending: RunEnding,
    status: JobStatus | None,
    counters: Counters,
    seconds: float,
    run_rows: int,
    fail_reason: str | None = None,
) -> None:
    """The canonical line of a job's run (``job_finished``), the same for workers and the CLI.

    ``counters`` are the job's (every run so far); ``run_rows`` the rows this run read, whose
    rate is logged. ``status`` is None when the run left the job to a later one.
    """
    logger.info(
        "job_finished",
        ending=ending.value,
        status=status.value if status is not None else None,
        rows_read=counters.rows_read,
        inserted=counters.inserted,
        updated=counters.updated,
        invalid=counters.invalid,
        error=counters.error,
        ignored=counters.ignored,
        **({} if fail_reason is None else {"fail_reason": fail_reason}),
        ms=round(seconds * 1000, 1),
        rows_per_s=rows_per_second(run_rows, seconds),  # this run's
    )
