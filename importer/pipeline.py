"""The import pipeline: one reader task → bounded queues → N consumer tasks.

The reader streams the source, decodes, parses and validates it, cuts the records into chunks of
``chunk_size`` and splits every chunk by key partition (``crc32(key) % partitions``). Consumer
``p`` owns partition ``p`` and applies its batches strictly in chunk order, so the rows of one key
always reach the database in file order, through one connection, whatever the chunk size or the
number of consumers. Each batch commits its writes, its counters and its ledger mark together.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import structlog

from importer import failpoints, lifecycle
from importer.exceptions import (
    ContentRefusedError,
    FileRejectedError,
    StoreError,
    TransientStoreError,
)
from importer.models import (
    Batch,
    ContactRow,
    Counters,
    InputFormat,
    Job,
    JobStatus,
    Reason,
    RowIssue,
)
from importer.ports import Finalized, Progress, Source, Store, Throttle
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


class NoThrottle:
    """The command line's import: nothing to give way to."""

    async def wait_turn(self) -> None:
        return


class NullProgress:
    def on_start(self, bytes_total: int | None) -> None:
        pass

    def on_batch(self, counters: Counters, bytes_read: int) -> None:
        pass


def _failure_kind(exc: StoreError) -> lifecycle.FailureKind:
    if isinstance(exc, TransientStoreError):
        return lifecycle.FailureKind.TRANSIENT
    if isinstance(exc, ContentRefusedError):
        return lifecycle.FailureKind.CONTENT
    return lifecycle.FailureKind.OTHER


def partition_of(key: str, partitions: int) -> int:
    """The key partition of a normalized key: stable across runs, processes and versions."""
    return zlib.crc32(key.encode()) % partitions


# --- source → records -------------------------------------------------------------------------


class BlockParser:
    """Raw source blocks → batches, synchronously (run off the event loop, in a thread).

    Inflates gzip one bounded piece at a time (a bomb never materializes), sniffs encoding and
    delimiter on the first 64 KiB, decodes records and hands them to the :class:`Chunker`.
    """

    def __init__(self, job: Job, source_name: str, config: PipelineConfig) -> None:
        self.chunker = Chunker(job, config)
        self._config = config
        self._format = job.input_format
        self._source_name = source_name
        self._inflater: GzipInflater | None = None
        self._pieces: Iterator[bytes] = iter(())
        self._head = bytearray()
        self._reader: CsvReader | JsonlReader | None = None
        self._started = False

    def push(self, block: bytes) -> None:
        """Take the next raw block; :meth:`pull` then parses it piece by piece."""
        if not self._started:
            self._started = True
            if block.startswith(_GZIP_MAGIC) or self._source_name.endswith(".gz"):
                self._inflater = GzipInflater(self._config.limits.max_decompressed_bytes)
        self._pieces = self._inflater.feed_iter(block) if self._inflater else iter((block,))

    def pull(self) -> list[Batch] | None:
        """The batches of the next piece of the pushed block; None once it is used up."""
        piece = next(self._pieces, None)
        return None if piece is None else self._feed_decoded(piece)

    def finish(self) -> list[Batch]:
        if self._inflater is not None:
            self._inflater.finish()
        batches: list[Batch] = []
        if self._reader is None:
            self._reader = _reader(bytes(self._head), self._format, self._config)
            batches += self.chunker.feed(self._reader.feed(bytes(self._head)))
        return batches + self.chunker.feed(self._reader.finish()) + self.chunker.finish()

    def _feed_decoded(self, data: bytes) -> list[Batch]:
        if self._reader is None:
            self._head += data
            if len(self._head) < _SNIFF_BYTES:
                return []
            self._reader = _reader(bytes(self._head), self._format, self._config)
            data = bytes(self._head)
        return self.chunker.feed(self._reader.feed(data))


def _check_size(bytes_read: int, limit: int) -> None:
    if bytes_read > limit:
        raise FileRejectedError(Reason.FILE_TOO_LARGE, f"more than {limit} bytes")


def _reader(
    sample: bytes, input_format: InputFormat, config: PipelineConfig
) -> CsvReader | JsonlReader:
    layout, limits = config.layout, config.limits
    sniffed = sniff(
        sample,
        encoding=layout.encoding if layout else None,
        delimiter=layout.delimiter if layout else None,
    )
    if input_format is InputFormat.JSONL:
        return JsonlReader(
            sniffed,
            max_field_chars=limits.max_field_chars,
            max_record_chars=limits.max_record_chars,
        )
    return CsvReader(
        sniffed, max_field_chars=limits.max_field_chars, max_record_chars=limits.max_record_chars
    )


# --- records → chunks → batches ---------------------------------------------------------------


@dataclass(slots=True)
class _ChunkBuffer:
    """The chunk being filled: valid rows per partition, the issues and the invalid count."""

    partitions: int
    chunk_no: int = 0
    first_line: int = 0
    end_offset: int = 0
    count: int = 0
    invalid: int = 0
    rows: list[list[ContactRow]] = field(default_factory=list)
    issues: list[RowIssue] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rows = [[] for _ in range(self.partitions)]

    def add(
        self, line: int, end_offset: int, row: ContactRow | None, issues: list[RowIssue]
    ) -> None:
        if self.count == 0:
            self.first_line = line
        self.count += 1
        self.end_offset = end_offset
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
            buffer.add(record.line, record.end_offset, row, issues)
            if buffer.count >= size:
                batches.extend(buffer.cut())
        return batches

    def finish(self) -> list[Batch]:
        if self._job.input_format is InputFormat.CSV and not self.header_seen:
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
    ) -> None:
        self.job = job
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
        # (chunk_no, partition) → the parts of split batches the ledger marks done (resume).
        self._done_parts: dict[tuple[int, int], frozenset[int]] = {}

    async def run(self) -> Finalized | None:
        """Run to the end: the finalization's result, or None when stopped before the end.

        A job a worker leased (``job.lease_owner``) is fenced: every status change and batch
        commits only while that worker holds the lease, else LeaseLostError stops the run. A
        resumed job (another worker's run stopped in it) re-enters its status and skips the
        batches its ledger marks done.
        """
        store = self._store
        owner = self.job.lease_owner
        await store.transition(self.job.id, lifecycle.entry_status(self.job.status), owner=owner)
        self._progress.on_start(self._source.size)
        done = await store.done_batches(self.job.id)
        self._done_parts = lifecycle.done_parts(done)
        await self._supervise(done)
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

    async def _supervise(self, done: frozenset[tuple[int, int, int]]) -> None:
        """Run the reader and the consumers; if one dies, stop the others and re-raise."""
        tasks = [asyncio.create_task(self._read(done), name=f"reader:{self.job.id}")]
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

    async def _read(self, done: frozenset[tuple[int, int, int]]) -> None:
        """Feed the consumers, then tell each that its partition ended (stopped or not)."""
        try:
            await self._read_blocks(done)
        except FileRejectedError as exc:  # the reader's FileRejected included
            self.state.failure = exc
        # Not in a `finally`: a cancelled reader must not block on a dead consumer's full queue.
        for queue in self._queues:
            await queue.put(None)

    async def _read_blocks(self, done: frozenset[tuple[int, int, int]]) -> None:
        """Stream the source; parse each block in a thread so consumers keep the loop.

        Returns early once ``stop`` is set: the batches not yet queued are left for a later run.
        """
        parser = BlockParser(self.job, self._source.name, self._config)
        started = False
        limit = self._config.limits.max_file_bytes
        async for block in self._source.blocks(self._config.read_block_bytes):
            self.state.bytes_read += len(block)
            _check_size(self.state.bytes_read, limit)
            parser.push(block)
            while (batches := await self._parse(parser)) is not None:
                started = await self._ensure_started(parser.chunker, started)
                await self._submit(batches, done)
            if self.stop.is_set():
                return
        batches = await asyncio.to_thread(parser.finish)
        started = await self._ensure_started(parser.chunker, started)
        await self._submit(batches, done)

    async def _parse(self, parser: BlockParser) -> list[Batch] | None:
        """The next piece's batches, parsed in a thread once the throttle gives the turn."""
        await self._throttle.wait_turn()
        return await asyncio.to_thread(parser.pull)

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
        for batch in batches:
            if self.stop.is_set():
                return
            if batch.key not in done:
                await self._queues[batch.partition].put(batch)

    async def _consume(self, partition: int) -> None:
        queue = self._queues[partition]
        store = self._store
        while (batch := await queue.get()) is not None:
            await self._throttle.wait_turn()
            counters = await self._apply(store, batch)
            self.state.counters.add(counters)
            self._progress.on_batch(self.state.counters, self.state.bytes_read)

    async def _apply(self, store: Store, batch: Batch) -> Counters:
        """Apply a batch (or a piece of one) with retries.

        A transient failure retries with backoff and, once attempts run out, discards the piece.
        A content failure (the database refused a row) splits the piece and applies its halves
        in order, down to the poison row, which alone is rejected (``lifecycle.failure_action``).
        """
        done = self._done_parts.get((batch.chunk_no, batch.partition), frozenset())
        if batch.part in done:  # a piece a previous run committed
            return Counters()
        if lifecycle.split_on_resume(batch.part, done):
            return await self._apply_halves(store, batch)
        batch_log = log.bind(
            job_id=str(self.job.id), chunk=batch.chunk_no, partition=batch.partition
        )
        if batch.part != 1:
            batch_log = batch_log.bind(part=batch.part)
        started = time.perf_counter()
        attempt = 0
        while True:
            attempt += 1
            try:
                counters = await store.apply_batch(self.job, batch)
            except StoreError as exc:
                action = lifecycle.failure_action(
                    batch, attempt, self._config.max_batch_attempts, _failure_kind(exc)
                )
                if action is lifecycle.FailureAction.RETRY:
                    batch_log.warning("batch_retry", attempt=attempt, error=str(exc))
                    await asyncio.sleep(lifecycle.retry_delay(attempt))
                    continue
                return await self._on_failure(store, batch, action, attempt, exc, batch_log)
            if failpoints.armed is not None:
                await failpoints.armed.reach(failpoints.AFTER_COMMIT)
            applied = counters if counters is not None else Counters()
            batch_log.info(  # the canonical line of a batch
                "chunk_applied",
                rows=batch.rows_read,
                inserted=applied.inserted,
                updated=applied.updated,
                invalid=applied.invalid,
                ignored=applied.ignored,
                attempts=attempt,
                ms=round((time.perf_counter() - started) * 1000, 1),
                repeated=counters is None,
            )
            return applied

    async def _on_failure(
        self,
        store: Store,
        batch: Batch,
        action: lifecycle.FailureAction,
        attempts: int,
        exc: Exception,
        batch_log: structlog.typing.FilteringBoundLogger,
    ) -> Counters:
        """Split, reject or discard a piece that failed for good."""
        if action is lifecycle.FailureAction.SPLIT:
            batch_log.warning("batch_split", rows=len(batch.rows), error=str(exc))
            return await self._apply_halves(store, batch)
        if action is lifecycle.FailureAction.REJECT:
            batch_log.warning("row_rejected", line=batch.rows[0].line, error=str(exc))
            reason = Reason.ROW_REJECTED
        else:
            batch_log.error("batch_discarded", attempts=attempts, error=str(exc))
            reason = Reason.CHUNK_DISCARDED
        await store.discard_batch(self.job, batch, attempts, str(exc), reason=reason)
        return lifecycle.discarded_counters(batch)

    async def _apply_halves(self, store: Store, batch: Batch) -> Counters:
        """The halves one after the other: per key, rows keep file order."""
        first, second = lifecycle.split_batch(batch)
        applied_first = await self._apply(store, first)
        return lifecycle.sum_counters((applied_first, await self._apply(store, second)))
