"""The source-format error report (``?format=source``, ``--errors-format source``): the rejected
rows as the user sent them, read back from the job's own file.

Nothing is kept on the hot path for it: the file the job imported is stored (an upload) or
sealed (a command line's local file), so the report reads it again, checked against the sealed
size and sha256, with the readers that imported it, and merges its records with the job's
report by line (``core.report.SourceReport``). It stops reading once the last rejected row is
written. Once the file is gone (or changed), the report says so in its first row and carries
each row's line and reason only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator

import structlog

from importer.core.config import PipelineConfig
from importer.core.errors import ChecksumMismatchError, FileRejectedError, ObjectNotFoundError
from importer.core.models import InputFormat, Job, RowIssue
from importer.core.report import SourceLayout, SourceRecord, SourceReport
from importer.ports import LocalFiles, ObjectStore, Source
from importer.read.blocks import RecordParser
from importer.read.records import JsonRecord, RawRecord
from importer.services.local import sealed_source

log = structlog.get_logger(__name__)


def _record(record: RawRecord | JsonRecord) -> SourceRecord:
    if isinstance(record, JsonRecord):
        return SourceRecord(record.line, values=record.values, raw=record.raw)
    return SourceRecord(record.line, fields=record.fields, raw=record.raw)


async def source_records(
    source: Source, config: PipelineConfig, parser: RecordParser
) -> AsyncGenerator[list[SourceRecord], None]:
    """The file's records in order, one parsing step (in a thread) at a time; never an empty
    list (the first one comes once the reader has sniffed the file)."""
    async for block in source.blocks(config.read_block_bytes):
        parser.push(block)
        while await asyncio.to_thread(parser.pull) is not None:
            if records := parser.take():
                yield [_record(r) for r in records]
    while await asyncio.to_thread(parser.pull_rows) is not None:  # a workbook's rows
        if records := parser.take():
            yield [_record(r) for r in records]
    await asyncio.to_thread(parser.finish)
    if records := parser.take():
        yield [_record(r) for r in records]


async def source_report(
    job: Job,
    source: Source | None,
    config: PipelineConfig,
    issues: AsyncIterator[RowIssue],
) -> AsyncIterator[str]:
    """The report's text; ``source`` None: the file is not available any more."""
    has_header = config.layout.has_header if config.layout is not None else True
    rejected = job.counters.invalid + job.counters.error
    if source is None:
        layout = SourceLayout(job.input_format is InputFormat.JSONL, ",", has_header)
        async for text in SourceReport(layout, rejected).rows(issues, _nothing()):
            yield text
        return
    parser = RecordParser(job, source.name, config)
    records = source_records(source, config, parser)
    try:
        first = await anext(records, None)  # the reader has sniffed the delimiter by then
        layout = SourceLayout(job.input_format is InputFormat.JSONL, parser.delimiter, has_header)
        async for text in SourceReport(layout, rejected).rows(issues, _then(first, records)):
            yield text
    except (FileRejectedError, ChecksumMismatchError, ObjectNotFoundError) as exc:
        # The file changed or went while it was read: what was written stays, and the rows
        # not written yet are lost from this report (its caller sees a truncated stream).
        log.warning("source_report_unreadable", job_id=str(job.id), error=str(exc)[:200])
        raise
    finally:
        parser.close()
        await records.aclose()


async def available_source(
    job: Job, objects: ObjectStore, local_files: LocalFiles | None
) -> Source | None:
    """The job's file checked against its seal, or None: gone or changed since (or a command
    line's local file, without ``local_files``)."""
    try:
        return await sealed_source(job, objects, local_files)
    except (ObjectNotFoundError, ChecksumMismatchError):
        return None


async def _nothing() -> AsyncIterator[list[SourceRecord]]:
    return
    yield []  # pragma: no cover - makes this an async generator


async def _then(
    first: list[SourceRecord] | None, rest: AsyncIterator[list[SourceRecord]]
) -> AsyncIterator[list[SourceRecord]]:
    if first is None:
        return
    yield first
    async for batch in rest:
        yield batch
