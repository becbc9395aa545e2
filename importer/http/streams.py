"""Streamed bodies of the API: the upload read from ASGI, events and reports written out.

Each is an async iterator of byte blocks, so neither an upload nor a report is ever held whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import time
import uuid
from collections.abc import AsyncIterator

import orjson
from starlette.requests import ClientDisconnect, Request

from importer.core.duplicates import Competition, report_document
from importer.core.errors import ObjectTooLargeError, RequestTooLargeError
from importer.core.models import TERMINAL_STATUSES, RowIssue
from importer.core.principals import Principal
from importer.core.report import DUPLICATE_COLUMNS, REPORT_COLUMNS, duplicate_row, report_row
from importer.metrics import ApiMetrics
from importer.ports import HintWatch, ProgressHints
from importer.services.documents import job_document
from importer.services.imports import ImportService

# Server-Sent Events: how often the job is looked at, and the longest silence on the stream.
SSE_POLL_S = 0.5
SSE_HEARTBEAT_S = 15.0
# With progress hints (Redis) the job is read when one arrives, at most this often (a burst of
# batches is one read), and at least this often (a hint is at-most-once: the poll stays).
SSE_HINT_GAP_S = 0.1
SSE_HINTED_POLL_S = 2.0
# Bytes of a report buffered per write to the socket.
REPORT_FLUSH_BYTES = 64 * 1024
# What a refused upload's rest may cost us to read, so the client sees the 413 (not a reset).
MAX_DRAIN_BYTES = 1024 * 1024
DRAIN_TIMEOUT_S = 5.0


# --- requests ---------------------------------------------------------------------------------


class Body:
    """A request body read straight from ASGI, block by block, knowing when it is complete.

    After a refusal mid-body (413), :meth:`drain` reads and drops a bounded rest, so the client
    gets to read our answer rather than a connection reset.
    """

    def __init__(self, request: Request, metrics: ApiMetrics) -> None:
        self._receive = request.receive
        self._metrics = metrics
        self.complete = False

    async def blocks(self) -> AsyncIterator[bytes]:
        while not self.complete:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            self.complete = not message.get("more_body", False)
            block = message.get("body", b"")
            if block:
                self._metrics.upload_bytes.inc(len(block))
                yield block

    async def drain(self) -> None:
        async def drop() -> None:
            dropped = 0
            async for block in self.blocks():
                dropped += len(block)
                if dropped > MAX_DRAIN_BYTES:
                    return

        with contextlib.suppress(TimeoutError, ClientDisconnect):
            await asyncio.wait_for(drop(), DRAIN_TIMEOUT_S)


@contextlib.asynccontextmanager
async def answer_when_too_large(body: Body) -> AsyncIterator[None]:
    """On a 413 mid-body, read and drop a bounded rest first (see :meth:`Body.drain`)."""
    try:
        yield
    except (ObjectTooLargeError, RequestTooLargeError):
        await body.drain()
        raise


# --- responses --------------------------------------------------------------------------------


def sse(event: str, document: object) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(document) + b"\n\n"


async def _wait(event: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds`` unless ``event`` is set first; True when it was."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
    return event.is_set()


async def _wait_any(events: tuple[asyncio.Event, ...], seconds: float) -> None:
    """Sleep ``seconds`` unless one of ``events`` is set first."""
    waiters = [asyncio.create_task(e.wait(), name=f"sse-wait:{i}") for i, e in enumerate(events)]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()  # an Event.wait holds nothing
        await asyncio.gather(*waiters, return_exceptions=True)


async def _next_look(draining: asyncio.Event, watch: HintWatch | None) -> bool:
    """Until the job should be read again; True when the server drains.

    Without live hints: the poll interval. With them: a hint (after a short gap that folds a
    burst of them into one read), or the slower poll that covers a lost hint.
    """
    if watch is None or not watch.live:
        return await _wait(draining, SSE_POLL_S)
    await _wait_any((draining, watch.changed), SSE_HINTED_POLL_S)
    return draining.is_set() or await _wait(draining, SSE_HINT_GAP_S)


@contextlib.asynccontextmanager
async def _watching(
    hints: ProgressHints | None, job_id: uuid.UUID
) -> AsyncIterator[HintWatch | None]:
    if hints is None:
        yield None
        return
    async with hints.watch(job_id) as watch:
        yield watch


def _comparable(document: dict[str, object]) -> dict[str, object]:
    """The document without what moves with the clock alone (the ETA, the recent rate)."""
    comparable = {k: v for k, v in document.items() if k != "eta_s"}
    progress = document.get("progress")
    if isinstance(progress, dict):
        comparable["progress"] = {k: v for k, v in progress.items() if k != "rows_per_s"}
    return comparable


async def progress_events(
    service: ImportService,
    principal: Principal,
    job_id: uuid.UUID,
    draining: asyncio.Event,
    hints: ProgressHints | None = None,
) -> AsyncIterator[bytes]:
    """``progress`` whenever the job changes, ``done`` at its end; a heartbeat when quiet.

    The job is always read from the database; ``hints`` (Redis) only say when to read it
    sooner. Ends when the job is terminal, when the server drains, or (Starlette cancels it)
    when the client goes away.
    """
    last: dict[str, object] | None = None
    quiet_since = time.monotonic()
    async with _watching(hints, job_id) as watch:
        while True:
            if watch is not None:
                watch.changed.clear()  # a hint from now on means another read
            view = await service.view(principal, job_id)
            document = job_document(view, service.clock())
            comparable = _comparable(document)
            if comparable != last:
                yield sse("progress", document)
                last, quiet_since = comparable, time.monotonic()
            elif time.monotonic() - quiet_since >= SSE_HEARTBEAT_S:
                yield b": heartbeat\n\n"
                quiet_since = time.monotonic()
            if view.status in TERMINAL_STATUSES:
                yield sse("done", document)
                return
            if await _next_look(draining, watch):
                return


async def csv_report(issues: AsyncIterator[RowIssue]) -> AsyncIterator[bytes]:
    """The report as CSV, cells neutralized against formula injection (core/report.py)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(REPORT_COLUMNS)
    async for issue in issues:
        writer.writerow(report_row(issue))
        if buffer.tell() >= REPORT_FLUSH_BYTES:
            yield buffer.getvalue().encode("utf-8")
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode("utf-8")


async def jsonl_report(issues: AsyncIterator[RowIssue]) -> AsyncIterator[bytes]:
    """The report as JSON lines with the raw values: JSON is data, not a spreadsheet."""
    pending = bytearray()
    async for issue in issues:
        pending += orjson.dumps(
            {
                "line": issue.line,
                "column": issue.column,
                "reason": issue.reason.value,
                "severity": issue.severity.value,
                "value": issue.value,
            }
        )
        pending += b"\n"
        if len(pending) >= REPORT_FLUSH_BYTES:
            yield bytes(pending)
            pending.clear()
    yield bytes(pending)


async def text_chunks(lines: AsyncIterator[str]) -> AsyncIterator[bytes]:
    """Text as UTF-8 bytes in pieces of about :data:`REPORT_FLUSH_BYTES`."""
    pending: list[str] = []
    size = 0
    async for line in lines:
        pending.append(line)
        size += len(line)
        if size >= REPORT_FLUSH_BYTES:
            yield "".join(pending).encode("utf-8")
            pending, size = [], 0
    if pending:
        yield "".join(pending).encode("utf-8")


async def csv_duplicates(rows: AsyncIterator[Competition]) -> AsyncIterator[bytes]:
    """The duplicate report as CSV, cells neutralized against formula injection."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(DUPLICATE_COLUMNS)
    async for row in rows:
        writer.writerow(duplicate_row(row))
        if buffer.tell() >= REPORT_FLUSH_BYTES:
            yield buffer.getvalue().encode("utf-8")
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode("utf-8")


async def jsonl_duplicates(rows: AsyncIterator[Competition]) -> AsyncIterator[bytes]:
    """The duplicate report as JSON lines with the raw values."""
    pending = bytearray()
    async for row in rows:
        pending += orjson.dumps(report_document(row))
        pending += b"\n"
        if len(pending) >= REPORT_FLUSH_BYTES:
            yield bytes(pending)
            pending.clear()
    yield bytes(pending)
