"""The import pipeline: one reader task → bounded queues → N consumer tasks.

The reader streams the source, decodes, parses and validates it, cuts the records into chunks of
``chunk_size`` and splits every chunk by key partition (``crc32(key) % partitions``). Consumer
``p`` owns partition ``p`` and applies its batches strictly in chunk order, so the rows of one key
always reach the database in file order, through one connection, whatever the chunk size or the
number of consumers. Each batch commits its writes, its counters and its ledger mark together.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import structlog

from importer import lifecycle
from importer.applier import BatchApplier
from importer.exceptions import (
    FileRejectedError,
)
from importer.fanout import BatchPublisher
from importer.models import (
    Batch,
    Checkpoint,
    ContactRow,
    Counters,
    InputFormat,
    Job,
    JobStatus,
    JobWarning,
    Reason,
    RowIssue,
)
from importer.ports import (
    Finalized,
    NullObserver,
    PipelineObserver,
    Progress,
    Source,
    Store,
    Throttle,
)
from importer.reader import (
    CsvReader,
    GzipInflater,
    JsonlReader,
    JsonRecord,
    RawRecord,
    sniff,
)
from importer.settings import Limits
from importer.validate import (
    Layout,
    RowBuilder,
    RowPlan,
    plan_for_header,
    plan_for_keys,
    plan_for_positions,
    record_issue,
)
from importer.xlsx import SheetReader, WorkbookSpool

log = structlog.get_logger("importer.pipeline")

_SNIFF_BYTES = 64 * 1024
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    limits: Limits
    layout: Layout | None = None
    international: bool = False
    read_block_bytes: int = 256 * 1024
    queue_depth: int = 2
    max_batch_attempts: int = 4
    # Multi-instance imports: chunks published ahead of the slowest lane (bounds the broker).
    publish_window: int = 8
    lane_poll_s: float = 0.05  # how often the coordinator looks at its lanes while it waits


class NoThrottle:
    """The command line's import: nothing to give way to."""

    async def wait_turn(self) -> None:
        return


class NullProgress:
    def on_start(self, bytes_total: int | None) -> None:
        pass

    def on_batch(self, counters: Counters, bytes_read: int) -> None:
        pass


def partition_of(key: str, partitions: int) -> int:
    """The key partition of a normalized key: stable across runs, processes and versions."""
    return zlib.crc32(key.encode()) % partitions


# --- source → records -------------------------------------------------------------------------


class BlockParser:
    """Raw source blocks → batches, synchronously (run off the event loop, in a thread).

    Inflates gzip one bounded piece at a time (a bomb never materializes), sniffs encoding and
    delimiter on the first 64 KiB, decodes records and hands them to the :class:`Chunker`.

    Given a :class:`Checkpoint`, it resumes there: the head still gives the encoding, the
    delimiter and the header, but the bytes up to the checkpoint are dropped undecoded and
    chunks are numbered on from it (same chunk size: the same chunk boundaries as before).

    An XLSX workbook is spooled to a temporary file as its blocks come (a zip is read from its
    end); once the last block is in, :meth:`pull_rows` reads its sheet a few thousand rows at a
    time. A resumed run reads the sheet again from its header and drops the rows before the
    checkpoint's line. :meth:`close` drops the spool, whatever the run's end.
    """

    def __init__(
        self,
        job: Job,
        source_name: str,
        config: PipelineConfig,
        checkpoint: Checkpoint | None = None,
    ) -> None:
        self.chunker = Chunker(job, config)
        self._config = config
        self._format = job.input_format
        self._source_name = source_name
        self._inflater: GzipInflater | None = None
        self._pieces: Iterator[bytes] = iter(())
        self._head = bytearray()
        self._reader: CsvReader | JsonlReader | None = None
        self._started = False
        self._checkpoint = checkpoint
        self._position = 0  # decoded-stream bytes passed to the reader or dropped before it
        self._spool = WorkbookSpool() if self._format is InputFormat.XLSX else None
        self._sheet: SheetReader | None = None

    def push(self, block: bytes) -> None:
        """Take the next raw block; :meth:`pull` then parses it piece by piece."""
        if not self._started:
            self._started = True
            if block.startswith(_GZIP_MAGIC) or self._source_name.endswith(".gz"):
                limits = self._config.limits
                self._inflater = GzipInflater(
                    limits.max_decompressed_bytes, max_ratio=limits.max_gzip_ratio
                )
        self._pieces = self._inflater.feed_iter(block) if self._inflater else iter((block,))

    def pull(self) -> list[Batch] | None:
        """The batches of the next piece of the pushed block; None once it is used up."""
        piece = next(self._pieces, None)
        if piece is None:
            return None
        if self._spool is not None:
            self._spool.write(piece)
            return []
        return self._feed_decoded(piece)

    def pull_rows(self) -> list[Batch] | None:
        """After the last block: the batches of a workbook's next rows; None once all are read
        (and at once for CSV and JSON Lines, whose last records :meth:`finish` gives)."""
        if self._spool is None:
            return None
        if self._sheet is None:
            if self._inflater is not None:
                self._inflater.finish()
            self._sheet = self._open_sheet(self._spool)
        records = self._sheet.read()
        if records is None:
            return None
        if self._checkpoint is not None:
            records = self._after_checkpoint(records, self._checkpoint)
        return self.chunker.feed(records)

    def close(self) -> None:
        if self._sheet is not None:
            self._sheet.close()
        if self._spool is not None:
            self._spool.close()

    def finish(self) -> list[Batch]:
        if self._inflater is not None:
            self._inflater.finish()
        if self._spool is not None:
            return self.chunker.finish()
        batches: list[Batch] = []
        reader = self._reader
        if reader is None:
            reader = self._start(bytes(self._head))
            batches += self.chunker.feed(reader.feed(self._resumed(bytes(self._head))))
        return batches + self.chunker.feed(reader.finish()) + self.chunker.finish()

    def _open_sheet(self, spool: WorkbookSpool) -> SheetReader:
        limits, layout = self._config.limits, self._config.layout
        return SheetReader(
            spool.file,
            sheet=layout.sheet if layout is not None else None,
            max_field_chars=limits.max_field_chars,
            max_record_chars=limits.max_record_chars,
            max_decompressed_bytes=limits.max_decompressed_bytes,
        )

    def _after_checkpoint(
        self, records: list[RawRecord], checkpoint: Checkpoint
    ) -> list[RawRecord]:
        """A resumed workbook's records after the checkpoint's line; the first record (the
        header, or the first row without one) plans the rows, as in the first run."""
        if not self.chunker.header_seen:
            if not records:
                return records
            if not self.chunker.resume(checkpoint, records[0]):
                self._checkpoint = None  # an unreadable header: the chunker rejects the file
                return records
        return [record for record in records if record.line >= checkpoint.end_line]

    def _feed_decoded(self, data: bytes) -> list[Batch]:
        reader = self._reader
        if reader is None:
            self._head += data
            if len(self._head) < _SNIFF_BYTES:
                return []
            data = bytes(self._head)
            reader = self._start(data)
        return self.chunker.feed(reader.feed(self._resumed(data)))

    def _start(self, head: bytes) -> CsvReader | JsonlReader:
        """The reader, from the head: at the file's start, or at the checkpoint."""
        checkpoint = self._checkpoint
        if checkpoint is not None and not self.chunker.resume(checkpoint, self._first(head)):
            checkpoint = self._checkpoint = None  # no header in the head: read it all again
        self._reader = _reader(head, self._format, self._config, checkpoint)
        return self._reader

    def _first(self, head: bytes) -> RawRecord | JsonRecord | None:
        """The head's first record (a CSV's header or first row), parsed by a reader of its own."""
        if self._format is InputFormat.JSONL:
            return None
        first = _reader(head, self._format, self._config)
        records = first.feed(head)
        return records[0] if records else None

    def suspect_encoding(self) -> JobWarning | None:
        """The file-level warning once the text read looks like UTF-8 read as a code page."""
        reader = self._reader
        if reader is None or reader.mojibake is None:
            return None
        return suspect_encoding_warning(reader.encoding, reader.mojibake)

    def _resumed(self, data: bytes) -> bytes:
        """The part of data at or after the checkpoint (all of it without one)."""
        start = self._position
        self._position += len(data)
        checkpoint = self._checkpoint
        if checkpoint is None or start >= checkpoint.end_offset:
            return data
        return data[checkpoint.end_offset - start :]


def suspect_encoding_warning(encoding: str, seen: str) -> JobWarning:
    """The warning of a file decoded as a single-byte code page that holds UTF-8 sequences."""
    return JobWarning(
        Reason.SUSPECT_ENCODING,
        f"the file was read as {encoding} but holds UTF-8 byte sequences (read as {seen!r}): "
        "its accented names may be garbled; check them, or give the layout "
        '"encoding": "utf-8" and import it again',
    )


def _check_size(bytes_read: int, limit: int) -> None:
    if bytes_read > limit:
        raise FileRejectedError(Reason.FILE_TOO_LARGE, f"more than {limit} bytes")


def _reader(
    sample: bytes,
    input_format: InputFormat,
    config: PipelineConfig,
    checkpoint: Checkpoint | None = None,
) -> CsvReader | JsonlReader:
    layout, limits = config.layout, config.limits
    start_line, start_offset = (
        (checkpoint.end_line, checkpoint.end_offset) if checkpoint is not None else (1, 0)
    )
    sniffed = sniff(
        sample[:_SNIFF_BYTES],  # exactly: the same decision whatever the block size, resumed or not
        encoding=layout.encoding if layout else None,
        delimiter=layout.delimiter if layout else None,
    )
    if input_format is InputFormat.JSONL:
        return JsonlReader(
            sniffed,
            max_field_chars=limits.max_field_chars,
            max_record_chars=limits.max_record_chars,
            start_line=start_line,
            start_offset=start_offset,
        )
    return CsvReader(
        sniffed,
        max_field_chars=limits.max_field_chars,
        max_record_chars=limits.max_record_chars,
        start_line=start_line,
        start_offset=start_offset,
    )


# --- records → chunks → batches ---------------------------------------------------------------


@dataclass(slots=True)
class _ChunkBuffer:
    """The chunk being filled: valid rows per partition, the issues and the invalid count."""

    partitions: int
    chunk_no: int = 0
    first_line: int = 0
    end_offset: int = 0
    end_line: int = 0
    count: int = 0
    invalid: int = 0
    rows: list[list[ContactRow]] = field(default_factory=list)
    issues: list[RowIssue] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rows = [[] for _ in range(self.partitions)]

    def add(
        self, record: RawRecord | JsonRecord, row: ContactRow | None, issues: list[RowIssue]
    ) -> None:
        if self.count == 0:
            self.first_line = record.line
        self.count += 1
        self.end_offset = record.end_offset
        self.end_line = record.end_line
        if issues:
            self.issues.extend(issues)
        if row is None:
            self.invalid += 1
        else:
            self.rows[partition_of(row.cpf_cnpj, self.partitions)].append(row)

    def cut(self) -> list[Batch]:
        """The chunk's batches, one per partition (empty ones too: every partition marks it)."""
        batches = [
            Batch(
                chunk_no=self.chunk_no,
                partition=p,
                first_line=self.first_line,
                end_offset=self.end_offset,
                rows=tuple(rows),
                issues=tuple(self.issues) if p == 0 else (),
                invalid=self.invalid if p == 0 else 0,
                end_line=self.end_line,
            )
            for p, rows in enumerate(self.rows)
        ]
        self.chunk_no += 1
        self.count = self.invalid = 0
        self.rows = [[] for _ in range(self.partitions)]
        self.issues = []
        return batches


class Chunker:
    """Records → batches: finds the header, builds rows, cuts chunks of ``chunk_size`` records.

    Pure apart from asking for custom fields: :attr:`new_custom_names` lists the names seen since
    the last call of :meth:`take_new_custom_names`, so the caller can create them first.
    """

    def __init__(self, job: Job, config: PipelineConfig) -> None:
        self._job = job
        self._config = config
        self._buffer = _ChunkBuffer(job.partitions)
        self._csv_builder: RowBuilder | None = None
        self._json_builders: dict[tuple[str, ...], RowBuilder] = {}
        self._known_custom: set[str] = set()
        self._new_custom: list[str] = []
        self.header_seen = False

    @property
    def chunks(self) -> int:
        """Chunks cut so far (numbered on from a checkpoint)."""
        return self._buffer.chunk_no

    def take_new_custom_names(self) -> list[str]:
        names, self._new_custom = self._new_custom, []
        return names

    def feed(self, records: Iterable[RawRecord | JsonRecord]) -> list[Batch]:
        batches: list[Batch] = []
        size = self._job.chunk_size
        buffer = self._buffer
        for record in records:
            if isinstance(record, JsonRecord):
                row, issues = self._json_row(record)
            elif self._csv_builder is None and self._start_csv(record):
                continue
            else:
                row, issues = self._csv_row(record)
            buffer.add(record, row, issues)
            if buffer.count >= size:
                batches.extend(buffer.cut())
        return batches

    def resume(self, checkpoint: Checkpoint, first: RawRecord | JsonRecord | None) -> bool:
        """Go on after ``checkpoint``: build the CSV plan from the file's first record (header
        or row; not counted: it lies before the checkpoint). False: no first record to plan by."""
        if self._job.input_format is not InputFormat.JSONL:
            if not isinstance(first, RawRecord) or first.fields is None:
                return False
            self._start_csv(first)
        self.header_seen = True
        self._buffer.chunk_no = checkpoint.chunk_no + 1
        return True

    def finish(self) -> list[Batch]:
        if self._job.input_format is not InputFormat.JSONL and not self.header_seen:
            raise FileRejectedError(Reason.EMPTY_FILE, "the file has no records")
        return self._buffer.cut() if self._buffer.count else []

    def _start_csv(self, record: RawRecord) -> bool:
        """Build the plan from the header (True: the record was the header) or by position."""
        layout = self._config.layout
        if record.fields is None:
            raise FileRejectedError(
                record.reason or Reason.INVALID_ENCODING,
                f"the header on line {record.line} is unreadable",
            )
        self.header_seen = True
        if layout is not None and not layout.has_header:
            plan = plan_for_positions(len(record.fields), layout)
            self._csv_builder = self._builder(plan)
            return False
        plan = plan_for_header(record.fields, layout, self._config.limits.max_columns)
        self._csv_builder = self._builder(plan)
        return True

    def _builder(self, plan: RowPlan) -> RowBuilder:
        for name in plan.custom_names:
            if name.lower() not in self._known_custom:
                self._known_custom.add(name.lower())
                self._new_custom.append(name)
        return RowBuilder(
            plan,
            international=self._config.international,
            max_value_chars=self._config.limits.max_value_chars,
        )

    def _csv_row(self, record: RawRecord) -> tuple[ContactRow | None, list[RowIssue]]:
        if record.fields is None:
            return None, [
                record_issue(record.line, record.reason or Reason.INVALID_ENCODING, record.raw)
            ]
        assert self._csv_builder is not None
        return self._csv_builder.build(record.line, record.fields)

    def _json_row(self, record: JsonRecord) -> tuple[ContactRow | None, list[RowIssue]]:
        self.header_seen = True
        if record.values is None:
            return None, [
                record_issue(record.line, record.reason or Reason.MALFORMED_JSON, record.raw)
            ]
        keys = tuple(record.values)
        builder = self._json_builders.get(keys)
        if builder is None:
            builder = self._builder(plan_for_keys(keys, self._config.layout))
            if len(self._json_builders) < 1024:  # bounded: hostile files vary their keys
                self._json_builders[keys] = builder
        return builder.build(record.line, list(record.values.values()))


# --- the run ----------------------------------------------------------------------------------


@dataclass(slots=True)
class RunState:
    """What the run learned, shared by its tasks (one event loop: no locks needed)."""

    counters: Counters = field(default_factory=Counters)
    bytes_read: int = 0
    failure: FileRejectedError | None = None
    chunks: int = 0  # chunks of the file, once the reader reached its end
    warned: bool = False  # the file-level suspect_encoding warning is recorded


class ImportRun:
    """One job's pipeline run. ``stop`` asks it to finish its in-flight batches and return."""

    def __init__(
        self,
        job: Job,
        source: Source,
        store: Store,
        config: PipelineConfig,
        progress: Progress | None = None,
        stop: asyncio.Event | None = None,
        throttle: Throttle | None = None,
        *,
        observer: PipelineObserver | None = None,
        publisher: BatchPublisher | None = None,
    ) -> None:
        self.job = job
        # Multi-instance mode: batches go to the broker for any instance to apply (fanout).
        self._publisher = publisher
        self._observer: PipelineObserver = observer or NullObserver()
        self._throttle: Throttle = throttle or NoThrottle()
        self._source = source
        self._store = store
        self._config = config
        self._progress: Progress = progress or NullProgress()
        self.stop = stop or asyncio.Event()
        self.state = RunState()
        self._queues: list[asyncio.Queue[Batch | None]] = [
            asyncio.Queue(config.queue_depth) for _ in range(job.partitions)
        ]
        self._applier = BatchApplier(store, job, max_attempts=config.max_batch_attempts)
        self._lanes_behind = 0  # multi-instance mode: the chunk every lane has passed

    async def run(self) -> Finalized | None:
        """Run to the end: the finalization's result, or None when stopped before the end.

        A job a worker leased (``job.lease_owner``) is fenced: every status change and batch
        commits only while that worker holds the lease, else LeaseLostError stops the run. A
        resumed job (another worker's run stopped in it) re-enters its status and skips the
        batches its ledger marks done. Imports of one client run one at a time (their turn),
        so concurrent imports of a client end as some serial order of them.
        """
        async with self._store.client_turn(self.job.client_id, self.stop) as turn:
            if not turn:  # stopped while another import of the client applied its rows
                return None
            return await self._run()

    async def _run(self) -> Finalized | None:
        store = self._store
        owner = self.job.lease_owner
        await store.transition(self.job.id, lifecycle.entry_status(self.job.status), owner=owner)
        self._progress.on_start(self._source.size)
        done = await store.done_batches(self.job.id)
        self._applier = BatchApplier(
            store,
            self.job,
            max_attempts=self._config.max_batch_attempts,
            observer=self._observer,
            done_parts=lifecycle.done_parts(done),
        )
        checkpoint = await store.checkpoint(self.job.id, self.job.partitions) if done else None
        if checkpoint is not None:
            log.info(
                "import_resumed",
                job_id=str(self.job.id),
                after_chunk=checkpoint.chunk_no,
                offset=checkpoint.end_offset,
                line=checkpoint.end_line,
            )
        if self._publisher is not None:
            await store.open_lanes(self.job.id, self.job.partitions)
        await self._supervise(done, checkpoint)
        if self._publisher is not None and self.state.failure is None:
            await self._await_lanes()
        if self.state.failure is not None:
            failure = self.state.failure
            log.warning(
                "import_rejected",
                job_id=str(self.job.id),
                reason=failure.reason.value,
                detail=failure.detail,
            )
            return await store.finalize(self.job.id, failure.reason.value, owner=owner)
        if self.stop.is_set():
            return None
        return await store.finalize(self.job.id, None, owner=owner)

    async def _supervise(
        self, done: frozenset[tuple[int, int, int]], checkpoint: Checkpoint | None
    ) -> None:
        """Run the reader and the consumers; if one dies, stop the others and re-raise.

        The tasks copy the context as they are created: their log lines carry the job's ids.
        """
        reader = self._read(done, checkpoint)
        with structlog.contextvars.bound_contextvars(
            job_id=str(self.job.id), client_id=self.job.client_id
        ):
            tasks = [asyncio.create_task(reader, name=f"reader:{self.job.id}")]
            if self._publisher is None:
                tasks += [
                    asyncio.create_task(self._consume(p), name=f"consumer:{self.job.id}:{p}")
                    for p in range(self.job.partitions)
                ]
        try:
            pending: set[asyncio.Task[None]] = set(tasks)
            while pending:
                finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                for task in finished:
                    if task.exception() is not None:
                        raise task.exception()  # type: ignore[misc]
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()  # last resort: a sibling failed
            await asyncio.gather(*tasks, return_exceptions=True)
            self._observer.on_queue_depth(-_drop_queued(self._queues))

    async def _read(
        self, done: frozenset[tuple[int, int, int]], checkpoint: Checkpoint | None
    ) -> None:
        """Feed the consumers, then tell each that its partition ended (stopped or not)."""
        try:
            await self._read_blocks(done, checkpoint)
        except FileRejectedError as exc:  # the reader's FileRejected included
            self.state.failure = exc
        # Not in a `finally`: a cancelled reader must not block on a dead consumer's full queue.
        if self._publisher is None:
            for queue in self._queues:
                await queue.put(None)

    async def _read_blocks(
        self, done: frozenset[tuple[int, int, int]], checkpoint: Checkpoint | None
    ) -> None:
        """Stream the source; parse each block in a thread so consumers keep the loop.

        Returns early once ``stop`` is set: the batches not yet queued are left for a later run.
        """
        parser = BlockParser(self.job, self._source.name, self._config, checkpoint)
        try:
            await self._parse_source(parser, done)
        finally:
            parser.close()

    async def _parse_source(
        self, parser: BlockParser, done: frozenset[tuple[int, int, int]]
    ) -> None:
        started = False
        limit = self._config.limits.max_file_bytes
        async for block in self._source.blocks(self._config.read_block_bytes):
            self.state.bytes_read += len(block)
            self._observer.on_bytes_read(len(block))
            _check_size(self.state.bytes_read, limit)
            parser.push(block)
            while (batches := await self._parse(parser.pull)) is not None:
                started = await self._ensure_started(parser.chunker, started)
                await self._warn(parser)
                await self._submit(batches, done)
            if self.stop.is_set():
                return
        while (batches := await self._parse(parser.pull_rows)) is not None:  # a workbook's rows
            started = await self._ensure_started(parser.chunker, started)
            await self._submit(batches, done)
            if self.stop.is_set():
                return
        batches = await asyncio.to_thread(parser.finish)
        started = await self._ensure_started(parser.chunker, started)
        await self._warn(parser)
        await self._submit(batches, done)
        self.state.chunks = parser.chunker.chunks
        if not self.stop.is_set():  # every batch is queued: the phase `finalizing`
            await self._store.mark_read_to_end(self.job.id, owner=self.job.lease_owner)

    async def _parse(self, step: Callable[[], list[Batch] | None]) -> list[Batch] | None:
        """The next step's batches, parsed in a thread once the throttle gives the turn."""
        await self._throttle.wait_turn()
        return await asyncio.to_thread(step)

    async def _warn(self, parser: BlockParser) -> None:
        """Record the file-level warning once, before the batches read with it are submitted
        (so a checkpoint past it implies it is stored: a resumed run need not see it again)."""
        if self.state.warned:
            return
        warning = parser.suspect_encoding()
        if warning is not None:
            self.state.warned = True
            log.warning("suspect_encoding", job_id=str(self.job.id), detail=warning.message)
            await self._store.add_warning(self.job.id, warning)

    async def _ensure_started(self, chunker: Chunker, started: bool) -> bool:
        """Create new custom fields before any batch using them; enter ``importing`` once."""
        names = chunker.take_new_custom_names()
        if names:
            created = await self._store.ensure_custom_fields(self.job, names)
            if created:
                log.info("custom_fields_created", job_id=str(self.job.id), created=created)
        if not started and chunker.header_seen:
            await self._store.transition(
                self.job.id, JobStatus.IMPORTING, owner=self.job.lease_owner
            )
            return True
        return started

    async def _submit(self, batches: list[Batch], done: frozenset[tuple[int, int, int]]) -> None:
        """Queue the batches not done yet; once ``stop`` is set, no more (between chunks)."""
        self._observer.on_records_read(sum(batch.rows_read for batch in batches))
        for batch in batches:
            if self.stop.is_set():
                return
            if batch.key in done:
                continue
            if self._publisher is not None:
                await self._publish(self._publisher, batch)
            else:
                await self._queues[batch.partition].put(batch)
                self._observer.on_queue_depth(1)

    async def _publish(self, publisher: BatchPublisher, batch: Batch) -> None:
        """Publish once the slowest lane is within the window (the broker holds a bounded
        part of the file, like the in-process queues)."""
        window = self._config.publish_window
        while batch.chunk_no >= self._lanes_behind + window and not self.stop.is_set():
            self._lanes_behind = await self._store.lanes_behind(self.job.id) or 0
            if batch.chunk_no >= self._lanes_behind + window:
                await asyncio.sleep(self._config.lane_poll_s)
        await publisher.publish(self.job, batch)

    async def _await_lanes(self) -> None:
        """Wait until every lane has passed the file's last chunk (or the run is stopped)."""
        while not self.stop.is_set():
            self._lanes_behind = await self._store.lanes_behind(self.job.id) or 0
            if self._lanes_behind >= self.state.chunks:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self._config.lane_poll_s)

    async def _consume(self, partition: int) -> None:
        queue = self._queues[partition]
        while (batch := await queue.get()) is not None:
            self._observer.on_queue_depth(-1)
            await self._throttle.wait_turn()
            with structlog.contextvars.bound_contextvars(
                chunk=batch.chunk_no, partition=batch.partition
            ):
                counters = await self._applier.apply(batch)
            self.state.counters.add(counters)
            self._progress.on_batch(self.state.counters, self.state.bytes_read)


def _drop_queued(queues: Iterable[asyncio.Queue[Batch | None]]) -> int:
    """Empty the queues of a run that ended; the number of batches they still held."""
    dropped = 0
    for queue in queues:
        while not queue.empty():
            dropped += queue.get_nowait() is not None
    return dropped
