"""The source-format error report (core.report.SourceReport): the rejected rows as they were
sent, merged by line with the job's issues; and its round trip through the pipeline — a report
imported again rejects the same rows for the same reasons, and reports them the same way."""

from __future__ import annotations

import asyncio
import csv
import io
import uuid
from collections.abc import AsyncIterator, Sequence

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from importer.core import report
from importer.core.config import PipelineConfig
from importer.core.models import (
    InputFormat,
    JobStatus,
    Limits,
    NewJob,
    Reason,
    RowIssue,
    Severity,
)
from importer.core.reference import InMemoryStore
from importer.core.report import SourceLayout, SourceRecord, SourceReport
from importer.pipeline.run import ImportRun
from importer.services.reports import source_report
from tests.strategies import GeneratedRow, csv_bytes, rows
from tests.support import BytesSource


async def _aiter(items: Sequence[object]) -> AsyncIterator[object]:
    for item in items:
        yield item


def _text(
    layout: SourceLayout, issues: list[RowIssue], records: list[SourceRecord], **kw: int
) -> str:
    async def run() -> str:
        out = SourceReport(
            layout, kw.get("rejected")
        ).rows(
            _aiter(issues),  # type: ignore[arg-type]
            _aiter([records[:2], records[2:]]),  # type: ignore[arg-type]
        )
        return "".join([text async for text in out])

    return asyncio.run(run())


def _issue(line: int, reason: Reason, column: str | None, severity: Severity) -> RowIssue:
    return RowIssue(line, column, reason, None, severity)


HEADER = SourceRecord(1, ["nome", "cpf", "celular"])
RECORDS = [
    HEADER,
    SourceRecord(2, ["Ana", "52998224725", ""]),
    SourceRecord(3, ["=HYPERLINK()", "123", "+55 11 91234-5678"]),
    SourceRecord(5, ["Bia", "", "x"]),  # a record over two physical lines starts at 5
    SourceRecord(7, None, raw="\ufffd\ufffdbroken"),
]
ISSUES = [
    _issue(0, Reason.SUSPECT_ENCODING, None, Severity.WARNING),  # the file's: no row
    _issue(2, Reason.INVALID_PHONE, "celular", Severity.WARNING),  # a valid row: not reported
    _issue(3, Reason.INVALID_CPF, "cpf", Severity.INVALID),
    _issue(5, Reason.MISSING_CPF_CNPJ, "cpf", Severity.INVALID),
    _issue(5, Reason.INVALID_PHONE, "celular", Severity.WARNING),
    _issue(7, Reason.INVALID_ENCODING, None, Severity.INVALID),
    _issue(9, Reason.ROW_REJECTED, None, Severity.ERROR),  # no record starts there
]


def test_the_rejected_rows_come_as_sent_with_their_reasons_formula_safe() -> None:
    text = _text(SourceLayout(delimiter=";"), ISSUES, RECORDS)
    assert list(csv.reader(io.StringIO(text), delimiter=";")) == [
        ["importer_error", "nome", "cpf", "celular"],
        ["line 3: invalid_cpf (cpf)", "'=HYPERLINK()", "123", "'+55 11 91234-5678"],
        ["line 5: missing_cpf_cnpj (cpf); invalid_phone (celular)", "Bia", "", "x"],
        ["line 7: invalid_encoding", "\ufffd\ufffdbroken"],
        ["line 9: row_rejected", "", "", ""],
    ]


def test_a_header_less_file_gets_the_column_last_and_json_lines_stay_json() -> None:
    text = _text(
        SourceLayout(has_header=False), ISSUES[:3], [SourceRecord(1, ["x"]), *RECORDS[1:3]]
    )
    assert list(csv.reader(io.StringIO(text))) == [
        ["'=HYPERLINK()", "123", "'+55 11 91234-5678", "line 3: invalid_cpf (cpf)"]
    ]
    records = [
        SourceRecord(1, values={"cpf": "1", "importer_error": "old"}),
        SourceRecord(2, raw="{x"),
    ]
    issues = [
        _issue(1, Reason.INVALID_CPF, "cpf", Severity.INVALID),
        _issue(2, Reason.MALFORMED_JSON, None, Severity.INVALID),
    ]
    lines = [
        orjson.loads(t) for t in _text(SourceLayout(json_lines=True), issues, records).splitlines()
    ]
    assert lines == [
        {"importer_error": "line 1: invalid_cpf (cpf)", "cpf": "1"},
        {"importer_error": "line 2: malformed_json", "importer_raw": "{x"},
    ]


def test_past_the_row_bound_only_line_and_reason_and_the_first_row_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(report, "SOURCE_MAX_ROWS", 1)
    text = _text(SourceLayout(), ISSUES, RECORDS, rejected=4)
    got = list(csv.reader(io.StringIO(text)))
    assert got[1][0].startswith("4 rows were rejected: the first 1 carry their record")
    assert got[2][1:] == ["'=HYPERLINK()", "123", "'+55 11 91234-5678"]
    assert got[3] == ["line 5: missing_cpf_cnpj (cpf); invalid_phone (celular)", "", "", ""]


def test_without_the_source_the_report_says_so_and_keeps_every_line() -> None:
    text = _text(SourceLayout(), ISSUES, [])
    got = list(csv.reader(io.StringIO(text)))
    assert got[0] == ["importer_error"]
    assert "not available" in got[1][0]
    assert [row[0].split(":")[0] for row in got[2:]] == ["line 3", "line 5", "line 7", "line 9"]


def test_a_report_sent_again_keeps_one_importer_error_column() -> None:
    header = SourceRecord(1, ["importer_error", "cpf"])
    record = SourceRecord(2, ["line 9: invalid_cpf (cpf)", "123"])
    issues = [_issue(2, Reason.INVALID_CPF, "cpf", Severity.INVALID)]
    assert list(csv.reader(io.StringIO(_text(SourceLayout(), issues, [header, record])))) == [
        ["importer_error", "cpf"],
        ["line 2: invalid_cpf (cpf)", "123"],
    ]


# --- the round trip through the pipeline -----------------------------------------------------

CONFIG = PipelineConfig(limits=Limits(), read_block_bytes=101)


async def _import(store: InMemoryStore, data: bytes) -> uuid.UUID:
    new_job = NewJob(uuid.uuid4(), 1, None, "f.csv", "csv", "merge", 3, 2)
    job = await store.create_job(new_job, JobStatus.QUEUED)
    await ImportRun(job, BytesSource("f.csv", data), store, CONFIG).run()
    return job.id


async def _source_report(store: InMemoryStore, job_id: uuid.UUID, data: bytes) -> bytes:
    job = store.jobs[job_id]
    text = source_report(job, BytesSource("f.csv", data), CONFIG, store.row_issues(job_id))
    return "".join([t async for t in text]).encode()


def _rejected(store: InMemoryStore, job_id: uuid.UUID) -> list[tuple[str, str]]:
    by_line: dict[int, list[str]] = {}
    for issue in store.issues[job_id]:
        by_line.setdefault(issue.line, []).append(f"{issue.reason.value}/{issue.severity.value}")
    return sorted(
        (",".join(sorted(v)), "") for v in by_line.values() if any("/warning" not in x for x in v)
    )


@settings(max_examples=60, deadline=None)
@given(body=st.lists(rows(), min_size=1, max_size=25))
def test_a_source_report_imported_again_rejects_the_same_rows_the_same_way(
    body: list[GeneratedRow],
) -> None:
    data = csv_bytes(body)

    async def check() -> None:
        store = InMemoryStore()
        first = await _import(store, data)
        assert store.jobs[first].input_format is InputFormat.CSV
        sent = await _source_report(store, first, data)
        rejected = store.jobs[first].counters.invalid + store.jobs[first].counters.error
        assert len(list(csv.reader(io.StringIO(sent.decode())))) == 1 + rejected  # + header
        again = await _import(store, sent)
        assert store.jobs[again].counters.invalid == rejected
        assert store.jobs[again].counters.inserted == store.jobs[again].counters.updated == 0
        assert _rejected(store, again) == _rejected(store, first)
        assert "importer_error" not in {name for (_, name) in store.custom_fields}
        resent = await _source_report(store, again, sent)
        assert _cells(resent) == _cells(sent)  # the same rows, importer_error's lines aside

    asyncio.run(check())


def _cells(data: bytes) -> list[list[str]]:
    return [row[1:] for row in csv.reader(io.StringIO(data.decode()))]
