"""The per-row error report and the duplicate-resolution report: formula-safe CSV cells (OWASP
CSV injection); and the error report as the rows the user sent (``?format=source``), to fix and
import again."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

import orjson

from importer.core.duplicates import Competition, losing_cell, winner_cell
from importer.core.models import RowIssue, Severity

REPORT_COLUMNS = ("line", "column", "reason", "severity", "value")
DUPLICATE_COLUMNS = ("key", "field", "winner_value", "winner_line", "losing_lines", "rule")

_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "\x00")


def capped(issues: Sequence[RowIssue]) -> list[RowIssue]:
    """The issues the report's cap (IMPORTER_MAX_ROW_ERRORS) counts: invalid rows and warnings.
    A batch's ``error`` rows (discarded after its retries) are always stored: they are few, and
    a redelivered batch finds its discard by them."""
    return [i for i in issues if i.severity is not Severity.ERROR]


def within_cap(issues: Sequence[RowIssue], fits: int) -> list[RowIssue]:
    """``issues`` without the counted ones past the first ``fits`` (in the batch's order)."""
    kept: list[RowIssue] = []
    for issue in issues:
        if issue.severity is Severity.ERROR:
            kept.append(issue)
        elif fits > 0:
            kept.append(issue)
            fits -= 1
    return kept


def neutralize(cell: str) -> str:
    """Prefix a cell that a spreadsheet would run as a formula with ``'``."""
    if cell.startswith(_FORMULA_PREFIXES):
        return "'" + cell
    return cell


def report_row(issue: RowIssue) -> tuple[str, ...]:
    return (
        str(issue.line),
        neutralize(issue.column or ""),
        issue.reason.value,
        issue.severity.value,
        neutralize(issue.value or ""),
    )


async def write_csv_report(issues: AsyncIterator[RowIssue], out: TextIO) -> int:
    """Write the report with a header; return how many issues were written."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(REPORT_COLUMNS)
    count = 0
    async for issue in issues:
        writer.writerow(report_row(issue))
        count += 1
    return count


# --- the source-format report: the rejected rows as they were sent --------------------------

SOURCE_ERROR_COLUMN = "importer_error"  # a column of this exact name is ignored on import
SOURCE_MAX_ROWS = 100_000  # rows written with their record; past it, line and reason only
SOURCE_MAX_BYTES = 50 * 1024 * 1024  # the same bound on the records' text


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """A record of the file as a reader gave it: its fields (CSV, XLSX) or its object (JSON
    Lines), or, when it could not be decoded, the start of its text."""

    line: int
    fields: Sequence[str] | None = None
    values: Mapping[str, str] | None = None
    raw: str = ""


@dataclass(frozen=True, slots=True)
class SourceLayout:
    """How the report is written: JSON Lines for a JSON Lines file, else CSV in the file's
    delimiter; a header-less file gets its ``importer_error`` column last (its positions stay)."""

    json_lines: bool = False
    delimiter: str = ","
    has_header: bool = True


def error_text(issues: Sequence[RowIssue]) -> str:
    """A row's issues for the ``importer_error`` cell: ``line 7: invalid_cpf (cpf); …``."""
    reasons = "; ".join(
        f"{i.reason.value} ({i.column})" if i.column else i.reason.value for i in issues
    )
    return f"line {issues[0].line}: {reasons}"


class SourceReport:
    """The source-format error report, line by line: :meth:`rows` merges the job's issues (by
    line) with the file's records (in file order) and yields the report's text.

    A row is written for every line with an ``invalid`` or ``error`` issue (its warnings are
    named too): its record as the reader decoded it, with the issues in ``importer_error``.
    Past :data:`SOURCE_MAX_ROWS` rows or :data:`SOURCE_MAX_BYTES` of records, or for a line
    whose record is not there, only the line and its issues (the first row says so when the
    count is known to be past the bound). CSV cells are formula-safe.
    """

    def __init__(self, layout: SourceLayout, rejected_rows: int | None = None) -> None:
        self._layout = layout
        self._rejected_rows = rejected_rows
        self._width = 0
        self._error_at: int | None = None  # the file's own importer_error column, if any
        self._written = 0
        self._bytes = 0
        self._out = io.StringIO()
        self._writer = csv.writer(self._out, delimiter=layout.delimiter, lineterminator="\r\n")

    async def rows(
        self, issues: AsyncIterator[RowIssue], records: AsyncIterator[Sequence[SourceRecord]]
    ) -> AsyncIterator[str]:
        by_line = _rejected_lines(issues)
        wanted = await anext(by_line, None)
        first = True
        async for batch in records:
            for record in batch:
                if first:
                    first = False
                    head = self._head(record)
                    if head:
                        yield head
                    if self._layout.has_header and not self._layout.json_lines:
                        continue
                while wanted is not None and wanted[0].line < record.line:
                    yield self._bare(wanted)  # a line no record starts at
                    wanted = await anext(by_line, None)
                if wanted is not None and wanted[0].line == record.line:
                    yield self._row(wanted, record)
                    wanted = await anext(by_line, None)
            if wanted is None:
                return  # every rejected row is written: the rest of the file is not needed
        if first:
            yield self._head(None)
        while wanted is not None:
            yield self._bare(wanted)
            wanted = await anext(by_line, None)

    def _head(self, record: SourceRecord | None) -> str:
        """The header row (CSV with a header) and the note of a report past its bounds."""
        layout = self._layout
        text = ""
        if record is None:  # no record at all: the source is gone, or the file is empty
            text = self._line([SOURCE_ERROR_COLUMN]) if not layout.json_lines else ""
            self._width = 1
            return text + self._note("the source file is not available: line and reason only")
        fields = list(record.fields or ())
        if layout.has_header and SOURCE_ERROR_COLUMN in fields:  # a report sent again
            self._error_at = fields.index(SOURCE_ERROR_COLUMN)
        self._width = len(fields) + (self._error_at is None)
        if layout.has_header and not layout.json_lines:
            text = self._line(self._cells(SOURCE_ERROR_COLUMN, fields))
        rejected = self._rejected_rows
        if rejected is not None and rejected > SOURCE_MAX_ROWS:
            text += self._note(
                f"{rejected} rows were rejected: the first {SOURCE_MAX_ROWS} carry their record,"
                " the others only their line and reason"
            )
        return text

    def _note(self, text: str) -> str:
        if self._layout.json_lines:
            return orjson.dumps({SOURCE_ERROR_COLUMN: text}).decode() + "\n"
        return self._line(self._cells(text, [""] * (self._width - 1)))

    def _row(self, issues: Sequence[RowIssue], record: SourceRecord) -> str:
        if self._written >= SOURCE_MAX_ROWS or self._bytes >= SOURCE_MAX_BYTES:
            return self._bare(issues)
        self._written += 1
        error = error_text(issues)
        if self._layout.json_lines:
            document: dict[str, str] = {SOURCE_ERROR_COLUMN: error}
            if record.values is not None:  # the object's own importer_error takes the new text
                document |= {k: v for k, v in record.values.items() if k != SOURCE_ERROR_COLUMN}
            else:
                document["importer_raw"] = record.raw
            text = orjson.dumps(document).decode() + "\n"
        elif record.fields is not None:
            text = self._line(self._cells(error, record.fields))
        else:  # undecodable: the start of its text, in the first column
            text = self._line(self._cells(error, [record.raw]))
        self._bytes += len(text)
        if self._bytes >= SOURCE_MAX_BYTES:
            text += self._note(f"records past {SOURCE_MAX_BYTES} bytes: line and reason only")
        return text

    def _bare(self, issues: Sequence[RowIssue]) -> str:
        if self._layout.json_lines:
            return orjson.dumps({SOURCE_ERROR_COLUMN: error_text(issues)}).decode() + "\n"
        return self._line(self._cells(error_text(issues), [""] * max(self._width - 1, 0)))

    def _cells(self, error: str, fields: Sequence[str]) -> list[str]:
        cells = [neutralize(f) for f in fields]
        at = self._error_at
        if at is not None:  # the file's own importer_error column takes the new text
            cells += [""] * (at + 1 - len(cells))
            cells[at] = neutralize(error)
            return cells
        if self._layout.has_header:
            return [neutralize(error), *cells]
        return [*cells, neutralize(error)]

    def _line(self, cells: Sequence[str]) -> str:
        self._writer.writerow(cells)
        text = self._out.getvalue()
        self._out.seek(0)
        self._out.truncate()
        return text


async def _rejected_lines(issues: AsyncIterator[RowIssue]) -> AsyncIterator[list[RowIssue]]:
    """The issues of each line with an invalid or error issue, in line order (warnings of a
    valid row, and the file's line 0, are not rows of this report)."""
    group: list[RowIssue] = []
    async for issue in issues:
        if issue.line <= 0:
            continue
        if group and issue.line != group[0].line:
            if any(i.severity is not Severity.WARNING for i in group):
                yield group
            group = []
        group.append(issue)
    if group and any(i.severity is not Severity.WARNING for i in group):
        yield group


def duplicate_row(competition: Competition) -> tuple[str, ...]:
    """A duplicate report row's CSV cells: winner_line a number or ``stored``, the losing
    lines space separated (``stored`` among them when the stored value lost)."""
    return (
        neutralize(competition.key),
        neutralize(competition.field),
        neutralize(competition.winner_value or ""),
        winner_cell(competition),
        losing_cell(competition),
        competition.rule,
    )


async def write_csv_duplicates(rows: AsyncIterator[Competition], out: TextIO) -> int:
    """Write the duplicate report with a header; return how many rows were written."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(DUPLICATE_COLUMNS)
    count = 0
    async for row in rows:
        writer.writerow(duplicate_row(row))
        count += 1
    return count
