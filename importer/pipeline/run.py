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
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import asdict, dataclass, field

import structlog

from importer.core import keys, lifecycle, threshold
from importer.core.config import PipelineConfig
from importer.core.errors import FileRejectedError
from importer.core.models import (
    Batch,
    Checkpoint,
    Counters,
    Finalized,
    Job,
    JobStatus,
    Reason,
    RowIssue,
)
from importer.pipeline.applier import BatchApplier
from importer.pipeline.spool import BatchSpool
from importer.ports import (
    BatchPublisher,
    NullObserver,
    PipelineObserver,
    Progress,
    Source,
    Store,
    Throttle,
)
from importer.read.blocks import BlockParser
from importer.read.chunker import Chunker

log = structlog.get_logger(__name__)

_SPOOL_STEP = 16  # spooled batches read back at a time


class NoThrottle:
    """The command line's import: nothing to give way to."""

    async def wait_turn(self) -> None:
        return


class NullProgress:
    def on_start(self, bytes_total: int | None) -> None:
        pass

    def on_batch(self, counters: Counters, bytes_read: int) -> None:
        pass


def _check_size(bytes_read: int, limit: int) -> None:
    if bytes_read > limit:
        raise FileRejectedError(Reason.FILE_TOO_LARGE, f"more than {limit} bytes")


@dataclass(slots=True)
class RunState:
    """What the run learned, shared by its tasks (one event loop: no locks needed)."""

    counters: Counters = field(default_factory=Counters)
    bytes_read: int = 0
    failure: FileRejectedError | None = None
    chunks: int = 0  # chunks of the file, once the reader reached its end
    warned: bool = False  # the file-level suspect_encoding warning is recorded
    read_all: bool = False  # the reader reached the end of the file


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
        self._validating = False  # the whole file is validated before its batches are applied
        self._groups = keys.NO_GROUPS  # how a channel key's rows find their partition

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
        if self.job.previews:
            return await self._preview()
        done = await store.done_batches(self.job.id)
        if not done:  # a preview's or a validation's report: the batches report their rows again
            await store.clear_row_issues(self.job.id)
        self._validating = validates_first(self.job, done)
        self._groups = await store.key_groups(self.job)
        if self._groups.canonical or self._groups.whole:
            log.info(
                "key_groups",
                job_id=str(self.job.id),
                grouped_values=len(self._groups.canonical),
                whole=self._groups.whole,
            )
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
            return await self._rejected(self.state.failure)
        if self.stop.is_set():
            return None
        return await store.finalize(self.job.id, None, owner=owner)

    async def _preview(self) -> Finalized | None:
        """A preview's run: read and validate the whole file, stage its valid rows, plan them
        against the client's contacts, and rest in ``ready`` with the document (nothing is
        written to the contact tables). Past its error threshold, it fails like an import."""
        store, job = self._store, self.job
        await store.clear_preview(job.id)  # a preview run again from the start
        await store.clear_row_issues(job.id)
        parser = BlockParser(job, self._source.name, self._config, None)
        invalid = 0
        try:
            async with contextlib.aclosing(self._steps(parser)) as steps:
                async for batches in steps:
                    await self._warn(parser)
                    for batch in batches:
                        await store.stage_preview(job.id, batch.rows, batch.partition)
                        await store.add_row_issues(job.id, batch.issues)
                        invalid += batch.invalid
            fields = parser.chunker.take_new_custom_names()
        except FileRejectedError as exc:
            await store.clear_preview(job.id)
            return await self._rejected(exc)
        finally:
            parser.close()
        try:
            if not self.state.read_all:  # stopped: nothing to show
                return None
            builder, new_fields = await store.plan_preview(job, fields)
        finally:
            await store.clear_preview(job.id)
        builder.add_invalid(invalid)
        counters = builder.counters
        if job.max_invalid is not None:
            limit = threshold.parse_max_invalid(job.max_invalid)
            found = threshold.validation(limit, counters.invalid, counters.rows_read)
            await store.save_validation(job.id, found, owner=job.lease_owner)
            if found["exceeded"] is True:
                reason = Reason.TOO_MANY_INVALID_ROWS
                detail = threshold.exceeded_detail(found)
                return await self._rejected(FileRejectedError(reason, detail))
        document = builder.document(new_fields)
        await store.rest_ready(job.id, document, self._config.preview_ttl_s, owner=job.lease_owner)
        log.info("preview_ready", job_id=str(job.id), **asdict(counters))
        return Finalized(JobStatus.READY, counters)

    async def _rejected(self, failure: FileRejectedError) -> Finalized | None:
        log.warning(
            "import_rejected",
            job_id=str(self.job.id),
            reason=failure.reason.value,
            detail=failure.detail,
        )
        return await self._store.finalize(
            self.job.id, failure.reason.value, owner=self.job.lease_owner
        )

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
        parser = BlockParser(self.job, self._source.name, self._config, checkpoint, self._groups)
        try:
            if self._validating:
                await self._validate_then_submit(parser, done)
            else:
                await self._parse_source(parser, done)
        finally:
            parser.close()

    async def _steps(self, parser: BlockParser) -> AsyncGenerator[list[Batch], None]:
        """The file's batches, one parsing step (in a thread) at a time; the last step is the
        file's end (``state.read_all``). Ends early once ``stop`` is set."""
        limit = self._config.limits.max_file_bytes
        async for block in self._source.blocks(self._config.read_block_bytes):
            self.state.bytes_read += len(block)
            self._observer.on_bytes_read(len(block))
            _check_size(self.state.bytes_read, limit)
            parser.push(block)
            while (batches := await self._parse(parser.pull)) is not None:
                yield batches
            if self.stop.is_set():
                return
        while (batches := await self._parse(parser.pull_rows)) is not None:  # a workbook's rows
            yield batches
            if self.stop.is_set():
                return
        final = await asyncio.to_thread(parser.finish)
        self.state.read_all = True
        self.state.chunks = parser.chunker.chunks
        yield final

    async def _parse_source(
        self, parser: BlockParser, done: frozenset[tuple[int, int, int]]
    ) -> None:
        started = False
        async with contextlib.aclosing(self._steps(parser)) as steps:
            async for batches in steps:
                started = await self._ensure_started(parser.chunker, started)
                await self._warn(parser)
                await self._submit(batches, done)
        await self._read_to_end()

    async def _read_to_end(self) -> None:
        if self.state.read_all and not self.stop.is_set():  # all queued: the phase `finalizing`
            await self._store.mark_read_to_end(self.job.id, owner=self.job.lease_owner)

    async def _validate_then_submit(
        self, parser: BlockParser, done: frozenset[tuple[int, int, int]]
    ) -> None:
        """Validate the whole file before any contact is written (``max_invalid``).

        Each block is parsed once: the batches wait in a spool (a temporary file), and are
        submitted from there once the invalid rows are known to be within the threshold; past
        it, their issues are reported and the run fails ``too_many_invalid_rows``.
        """
        assert self.job.max_invalid is not None
        limit = threshold.parse_max_invalid(self.job.max_invalid)
        spool = BatchSpool(self.job.id, self._config.limits, compiled=self._config.compiled)
        try:
            invalid = rows = 0
            async with contextlib.aclosing(self._steps(parser)) as steps:
                async for batches in steps:
                    await self._warn(parser)
                    await asyncio.to_thread(spool.write, batches)
                    invalid += sum(batch.invalid for batch in batches)
                    invalid += len(await self._ambiguous(batches))
                    rows += sum(batch.rows_read for batch in batches)
            if not self.state.read_all:  # stopped: a later run validates again
                return
            await self._check_threshold(spool, limit, invalid, rows)
            await self._ensure_started(parser.chunker, False)
            spool.rewind()
            while batches := await asyncio.to_thread(spool.read, _SPOOL_STEP):
                await self._submit(batches, done)
                if self.stop.is_set():
                    return
            await self._read_to_end()
        finally:
            spool.close()

    async def _check_threshold(
        self, spool: BatchSpool, limit: threshold.MaxInvalid, invalid: int, rows: int
    ) -> None:
        """Record the validation; past the threshold, report every issue and fail the run."""
        found = threshold.validation(limit, invalid, rows)
        await self._store.save_validation(self.job.id, found, owner=self.job.lease_owner)
        log.info("import_validated", job_id=str(self.job.id), **found)
        if found["exceeded"] is not True:
            return
        spool.rewind()
        while batches := await asyncio.to_thread(spool.read, _SPOOL_STEP):
            issues = [issue for batch in batches for issue in batch.issues]
            await self._store.add_row_issues(self.job.id, issues + await self._ambiguous(batches))
        raise FileRejectedError(Reason.TOO_MANY_INVALID_ROWS, threshold.exceeded_detail(found))

    async def _ambiguous(self, batches: list[Batch]) -> list[RowIssue]:
        """A channel key's rows the batches will refuse as ``ambiguous_key`` (core.keys): the
        validation counts them with the file's invalid rows."""
        if keys.key_channel_of(self.job.layout) is None:
            return []
        return await self._store.ambiguous_rows(self.job, [r for b in batches for r in b.rows])

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


def validates_first(job: Job, done: frozenset[tuple[int, int, int]]) -> bool:
    """Whether a run validates the whole file before it applies a batch: the job has an error
    threshold, no batch is applied, and neither its preview nor an earlier run validated it."""
    return (
        job.max_invalid is not None
        and not done
        and job.preview is None
        and (job.validation is None)
    )


def _drop_queued(queues: Iterable[asyncio.Queue[Batch | None]]) -> int:
    """Empty the queues of a run that ended; the number of batches they still held."""
    dropped = 0
    for queue in queues:
        while not queue.empty():
            dropped += queue.get_nowait() is not None
    return dropped
