"""The columns step (issue 29): a file's columns with samples and suggested targets, the
mapping a user sets before the import starts, and the client's memory of past mappings.

Only the file's head is read (the header and the first :data:`HEAD_ROWS` rows, with the import's
own readers), so the answer takes the same time for a 1 KB and a 1 GB file; a workbook (XLSX) is
read from its end, as a zip is, so its whole file is spooled first. The suggestions are pure
(``core.columns``); the API (``http/routes/columns.py``) and ``importer inspect`` share them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

import structlog

from importer.core.columns import (
    ClientColumns,
    ColumnTarget,
    ColumnView,
    CustomField,
    MemoryEntry,
    SampledColumn,
    import_targets,
    mapping_layout,
    memory_of,
    parse_mapping,
    remembered,
    suggest_all,
)
from importer.core.config import PipelineConfig
from importer.core.errors import (
    ColumnsLockedError,
    ColumnsUnavailableError,
    FileRejectedError,
    InvalidRequestError,
    JobNotFoundError,
    LayoutError,
    ObjectNotFoundError,
)
from importer.core.headers import TargetKind
from importer.core.layout import LAYOUT_KEYS, parse_layout, plan_for_header, plan_for_keys
from importer.core.models import ConflictStrategy, InputFormat, Job, JobStatus, Reason
from importer.core.principals import Permission, Principal
from importer.ports import ColumnStore, JobStore, ObjectStore, Source
from importer.read.blocks import RecordParser
from importer.read.records import JsonRecord, RawRecord
from importer.services.imports import can_see
from importer.services.local import S3_SCHEME
from importer.services.runs import ObjectSource, job_config
from importer.settings import Settings

log = structlog.get_logger(__name__)

# Rows of the head whose values are sampled (five shown; all of them for the value shapes).
HEAD_ROWS = 50
# Bytes of a file read at most for its head (a workbook is read whole: a zip's end comes first).
HEAD_MAX_BYTES = 16 * 1024 * 1024
# The statuses whose mapping may still change: the file uploaded, no run started.
MAPPABLE = (JobStatus.UPLOADING, JobStatus.UPLOADED)


@dataclass(frozen=True, slots=True)
class FileHead:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]  # the first rows' values, by column

    def columns(self) -> list[SampledColumn]:
        return [
            SampledColumn(i, h, tuple(row[i] for row in self.rows if i < len(row)))
            for i, h in enumerate(self.headers)
        ]


@dataclass(frozen=True, slots=True)
class ColumnsStep:
    """What the columns step shows of one file: each column's suggestion and what the import
    does with it as it stands (the mapping set, or the job's layout, else the header aliases)."""

    columns: list[ColumnView]
    targets: list[ColumnTarget]
    mapped: bool  # the job has a mapping of its columns (a layout's, or one set here)
    known: ClientColumns


async def read_head(source: Source, job: Job, config: PipelineConfig, rows: int) -> FileHead:
    """The header and the first ``rows`` rows, read with the import's own readers; it stops
    reading once it has them (or at the end). Raises FileRejectedError for an unreadable head."""
    parser = RecordParser(job, source.name, config)
    blocks = source.blocks(config.read_block_bytes)
    records: list[RawRecord | JsonRecord] = []
    try:
        limit = None if job.input_format is InputFormat.XLSX else HEAD_MAX_BYTES
        records = await _head_records(parser, blocks, rows + 1, limit)
    finally:
        parser.close()
        await _close(blocks)
    has_header = config.layout.has_header if config.layout is not None else True
    if job.input_format is InputFormat.JSONL:
        return _json_head([r for r in records if isinstance(r, JsonRecord)], rows)
    return _csv_head([r for r in records if isinstance(r, RawRecord)], rows, has_header)


async def _head_records(
    parser: RecordParser, blocks: AsyncIterator[bytes], wanted: int, limit: int | None
) -> list[RawRecord | JsonRecord]:
    """The first ``wanted`` records, or those of the first ``limit`` bytes (a file of giant
    records, or of none, is not read to its end; None: a workbook, readable only whole)."""
    records: list[RawRecord | JsonRecord] = []
    read = 0
    async for block in blocks:
        parser.push(block)
        read += len(block)
        while await asyncio.to_thread(parser.pull) is not None:
            records += parser.take()
        if len(records) >= wanted or (limit is not None and read >= limit):
            return records
    while await asyncio.to_thread(parser.pull_rows) is not None:  # a workbook's rows
        records += parser.take()
        if len(records) >= wanted:
            return records
    await asyncio.to_thread(parser.finish)
    return records + parser.take()


async def _close(blocks: AsyncIterator[bytes]) -> None:
    close = getattr(blocks, "aclose", None)
    if close is not None:
        await close()


def _csv_head(records: Sequence[RawRecord], rows: int, has_header: bool) -> FileHead:
    """A CSV's (or a sheet's) header and first rows; the rows the import would reject as
    unreadable are no samples."""
    if not records or (has_header and records[0].fields is None):
        why = records[0].reason if records else None
        detail = "the file has no readable header" + (f" ({why})" if why else "")
        raise FileRejectedError(Reason.EMPTY_FILE, detail)
    body = [tuple(r.fields) for r in records[1 if has_header else 0 :] if r.fields is not None]
    first = records[0].fields
    width = max((len(r) for r in body), default=0)
    headers = tuple(first) if has_header and first is not None else ("",) * width
    return FileHead(tuple(h.strip() for h in headers), tuple(body[:rows]))


def _json_head(records: Sequence[JsonRecord], rows: int) -> FileHead:
    objects = [r.values for r in records if r.values is not None][:rows]
    keys: dict[str, None] = {}
    for values in objects:
        keys.update(dict.fromkeys(values))
    headers = tuple(keys)
    return FileHead(headers, tuple(tuple(o.get(k, "") for k in headers) for o in objects))


def columns_step(
    head: FileHead, known: ClientColumns, layout: Mapping[str, object] | None
) -> ColumnsStep:
    """Every column's suggestion and its target as things stand (pure: the CLI's too).
    ``mapped``: the layout names columns (a mapping set here, or the job's own layout)."""
    views = suggest_all(head.columns(), known)
    parsed = parse_layout(layout) if layout is not None else None
    targets = import_targets(parsed, head.headers, known)
    return ColumnsStep(views, targets, bool(parsed is not None and parsed.columns), known)


def _options_of(layout: Mapping[str, object] | None) -> dict[str, object]:
    """A job's layout options a mapping keeps (delimiter, encoding, sheet, merge, key…)."""
    kept = (k for k in LAYOUT_KEYS if k not in ("columns", "unmapped"))
    return {k: layout[k] for k in kept if layout is not None and k in layout}


def check_plan(layout: Mapping[str, object], head: FileHead, max_columns: int, jsonl: bool) -> None:
    """The import's own check of the mapping against the header (a cpf_cnpj column, or the
    layout key's; one column per attribute): its refusal is the request's 400."""
    try:
        parsed = parse_layout(layout)
        if jsonl:
            plan_for_keys(head.headers, parsed)
        elif parsed.has_header:
            plan_for_header(head.headers, parsed, max_columns)
    except LayoutError as exc:
        raise InvalidRequestError([(exc.field, str(exc))]) from None
    except FileRejectedError as exc:
        raise InvalidRequestError([("columns", exc.detail)]) from None


def _field(target: ColumnTarget) -> dict[str, object] | None:
    if target.field_name is None:
        return None
    return {"id": target.field_id, "name": target.field_name}


def _fields(fields: tuple[CustomField, ...]) -> list[dict[str, object]]:
    return [{"id": f.id, "name": f.name} for f in fields]


def columns_document(job_id: uuid.UUID | None, step: ColumnsStep) -> dict[str, object]:
    """The columns step's answer (``import_id`` None: ``importer inspect --json``'s)."""
    columns = []
    for view, target in zip(step.columns, step.targets, strict=True):
        suggestion = view.suggestion
        columns.append(
            {
                "position": view.column.position,
                "header": view.column.header,
                "samples": list(view.column.samples),
                "suggestion": {
                    "target": suggestion.target.kind.value,
                    "custom_field": _field(suggestion.target),
                    "reason": suggestion.reason.value,
                    "confidence": suggestion.confidence,
                    "share": suggestion.share,
                },
                "target": target.kind.value,
                "custom_field": _field(target),
            }
        )
    return {
        "import_id": None if job_id is None else str(job_id),
        "mapped": step.mapped,
        "columns": columns,
        "custom_fields": _fields(step.known.custom_fields),
    }


def transient_job(name: str, input_format: InputFormat, layout: dict[str, object] | None) -> Job:
    """A job that is never stored, for reading a local file's head (``importer inspect``)."""
    return Job(
        id=uuid.uuid4(),
        client_id=0,
        status=JobStatus.UPLOADED,
        strategy=ConflictStrategy.MERGE,
        source=name,
        input_format=input_format,
        chunk_size=1,
        partitions=1,
        filename=name,
        layout=layout,
    )


class ColumnService:
    """The columns step of the API, checked against the caller's tenant, user and permission."""

    def __init__(
        self, jobs: JobStore, columns: ColumnStore, objects: ObjectStore, settings: Settings
    ) -> None:
        self._jobs = jobs
        self._columns = columns
        self._objects = objects
        self._settings = settings

    async def inspect(self, principal: Principal, job_id: uuid.UUID) -> ColumnsStep:
        known = await self.known(principal)
        job = await self._job(principal, job_id)
        return columns_step(await self._head(job), known, job.layout)

    async def set_mapping(
        self, principal: Principal, job_id: uuid.UUID, body: Mapping[str, object]
    ) -> ColumnsStep:
        """Store the mapping as the job's layout (and the pairs its completion remembers)."""
        known = await self.known(principal)
        job = await self._job(principal, job_id)
        if job.status not in MAPPABLE:
            raise ColumnsLockedError(
                f"import {job_id} is {job.status}: its columns are set", field="columns"
            )
        head = await self._head(job)
        choices = parse_mapping(body, head.headers, known)
        layout = mapping_layout(choices, head.headers, _options_of(job.layout))
        jsonl = job.input_format is InputFormat.JSONL
        check_plan(layout, head, self._settings.limits.max_columns, jsonl)
        pairs = remembered(choices, head.headers)
        if not await self._columns.set_mapping(principal.client_id, job_id, layout, pairs):
            raise ColumnsLockedError(
                f"import {job_id} has started: its columns are set", field="columns"
            )
        log.info(
            "columns_mapped",
            job_id=str(job_id),
            client_id=principal.client_id,
            mapped=sum(1 for c in choices if c.target.kind is not TargetKind.IGNORE),
            columns=len(head.headers),
        )
        return columns_step(head, known, layout)

    async def known(self, principal: Principal) -> ClientColumns:
        principal.require(Permission.CONTACT_IMPORT_CREATE)
        fields = await self._columns.custom_fields(principal.client_id)
        return ClientColumns(fields, memory_of(await self._columns.memory(principal.client_id)))

    async def memory(self, principal: Principal) -> list[MemoryEntry]:
        principal.require(Permission.CONTACT_IMPORT_CREATE)
        return await self._columns.memory(principal.client_id)

    async def forget(self, principal: Principal) -> int:
        principal.require(Permission.CONTACT_IMPORT_CREATE)
        return await self._columns.clear_memory(principal.client_id)

    async def _job(self, principal: Principal, job_id: uuid.UUID) -> Job:
        """The caller's job (another user's, or another tenant's, is not found)."""
        view = await self._jobs.view_job(principal.client_id, job_id)
        if not can_see(principal, view):
            raise JobNotFoundError(f"import {job_id} does not exist")
        return await self._jobs.stored_job(principal.client_id, job_id)

    async def _head(self, job: Job) -> FileHead:
        if job.status is JobStatus.UPLOADING or job.local_path is not None:
            raise ColumnsUnavailableError(f"import {job.id}: its file is not uploaded here")
        if job.source.startswith(S3_SCHEME):
            raise ColumnsUnavailableError(f"import {job.id}: a command line's object")
        source = ObjectSource(self._objects, job.source, size=None, pinned=None, name=job.filename)
        started = time.perf_counter()
        try:
            head = await read_head(source, job, job_config(self._settings, job), HEAD_ROWS)
        except ObjectNotFoundError:
            raise ColumnsUnavailableError(f"import {job.id}: its file is gone") from None
        except FileRejectedError as exc:
            raise ColumnsUnavailableError(f"import {job.id}: {exc.detail}") from None
        log.info(
            "columns_read",
            job_id=str(job.id),
            client_id=job.client_id,
            columns=len(head.headers),
            rows=len(head.rows),
            ms=round((time.perf_counter() - started) * 1000, 1),
        )
        return head
