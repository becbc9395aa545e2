"""Streamed responses: the error reports and the event stream, with fakes for the job."""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import datetime as dt
import io
import uuid
from collections.abc import AsyncIterator, Iterable

import orjson
import pytest

from importer.core.models import (
    ConflictStrategy,
    Counters,
    InputFormat,
    JobStatus,
    JobView,
    Reason,
    RowIssue,
    Severity,
)
from importer.core.principals import Permission, Principal
from importer.http import streams

NOW = dt.datetime(2026, 7, 1, tzinfo=dt.UTC)
PRINCIPAL = Principal("ana", 1, frozenset({Permission.CONTACT_IMPORT_CREATE}))


async def issues(items: Iterable[RowIssue]) -> AsyncIterator[RowIssue]:
    for item in items:
        yield item


def issue(line: int, value: str) -> RowIssue:
    return RowIssue(line, "nome", Reason.INVALID_CPF, value, Severity.INVALID)


async def collect(blocks: AsyncIterator[bytes]) -> list[bytes]:
    return [block async for block in blocks]


async def test_csv_report_is_neutralized_and_streamed_in_blocks() -> None:
    rows = [issue(i, "=cmd|' /C calc'!A0" if i == 2 else "x" * 100) for i in range(2, 1500)]
    blocks = await collect(streams.csv_report(issues(rows)))
    assert len(blocks) > 1
    assert all(len(b) < streams.REPORT_FLUSH_BYTES + 1024 for b in blocks)
    parsed = list(csv.DictReader(io.StringIO(b"".join(blocks).decode())))
    assert len(parsed) == len(rows)
    assert parsed[0]["value"] == "'=cmd|' /C calc'!A0"


async def test_empty_csv_report_has_its_header() -> None:
    blocks = await collect(streams.csv_report(issues([])))
    assert b"".join(blocks) == b"line,column,reason,severity,value\n"


async def test_jsonl_report_keeps_raw_values() -> None:
    blocks = await collect(streams.jsonl_report(issues([issue(3, "=1+1"), issue(4, "\x00")])))
    lines = [orjson.loads(line) for line in b"".join(blocks).splitlines()]
    assert lines == [
        {
            "line": 3,
            "column": "nome",
            "reason": "invalid_cpf",
            "severity": "invalid",
            "value": "=1+1",
        },
        {
            "line": 4,
            "column": "nome",
            "reason": "invalid_cpf",
            "severity": "invalid",
            "value": "\x00",
        },
    ]


def view(status: JobStatus, rows: int = 0) -> JobView:
    return JobView(
        id=uuid.UUID(int=5),
        client_id=1,
        user_id="ana",
        status=status,
        conflict_strategy=ConflictStrategy.MERGE,
        input_format=InputFormat.CSV,
        source="1/x/a.csv",
        filename="a.csv",
        source_size=10,
        source_sha256="0" * 64,
        counters=Counters(rows_read=rows, inserted=rows),
        rows_done=rows,
        bytes_read=rows,
        bytes_total=10,
        fail_reason=None,
        cancel_requested=False,
        journey_id=None,
        tags=None,
        last_operation_id=None,
        created_at=NOW,
        updated_at=NOW,
        started_at=NOW,
        finished_at=None,
    )


@dataclasses.dataclass
class FakeService:
    views: list[JobView]
    calls: int = 0

    async def view(self, principal: Principal, job_id: uuid.UUID) -> JobView:
        current = self.views[min(self.calls, len(self.views) - 1)]
        self.calls += 1
        return current

    def clock(self) -> dt.datetime:
        return NOW


def events(blocks: list[bytes]) -> list[str]:
    return [b.split(b"\n", 1)[0].decode() for b in blocks]


@pytest.fixture
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "SSE_POLL_S", 0.0)


async def test_progress_on_change_then_done(fast_polls: None) -> None:
    service = FakeService(
        [
            view(JobStatus.QUEUED),
            view(JobStatus.QUEUED),
            view(JobStatus.IMPORTING, 4),
            view(JobStatus.COMPLETED, 10),
        ]
    )
    stream = streams.progress_events(service, PRINCIPAL, uuid.UUID(int=5), asyncio.Event())
    blocks = await collect(stream)
    assert events(blocks) == [
        "event: progress",
        "event: progress",
        "event: progress",
        "event: done",
    ]
    final = orjson.loads(blocks[-1].split(b"data: ", 1)[1])
    assert final["status"] == "completed"
    assert final["counters"]["rows_read"] == 10


async def test_heartbeat_when_quiet(fast_polls: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "SSE_HEARTBEAT_S", 0.0)
    service = FakeService([view(JobStatus.QUEUED)] * 2 + [view(JobStatus.FAILED)])
    stream = streams.progress_events(service, PRINCIPAL, uuid.UUID(int=5), asyncio.Event())
    blocks = await collect(stream)
    assert events(blocks) == ["event: progress", ": heartbeat", "event: progress", "event: done"]


async def test_draining_ends_the_stream() -> None:
    draining = asyncio.Event()
    service = FakeService([view(JobStatus.UPLOADING)])
    stream = streams.progress_events(service, PRINCIPAL, uuid.UUID(int=5), draining)
    first = await anext(stream)
    assert first.startswith(b"event: progress")
    draining.set()
    async with asyncio.timeout(2):
        assert await collect(stream) == []
