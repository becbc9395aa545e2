"""The per-row error report and the duplicate-resolution report: formula-safe CSV cells (OWASP
CSV injection)."""

from __future__ import annotations

import csv
from collections.abc import AsyncIterator
from typing import TextIO

from importer.core.duplicates import Competition, losing_cell, winner_cell
from importer.core.models import RowIssue

REPORT_COLUMNS = ("line", "column", "reason", "severity", "value")
DUPLICATE_COLUMNS = ("key", "field", "winner_value", "winner_line", "losing_lines", "rule")

_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "\x00")


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
