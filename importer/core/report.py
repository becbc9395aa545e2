"""The per-row error report: formula-safe CSV cells (OWASP CSV injection)."""

from __future__ import annotations

import csv
from collections.abc import AsyncIterator
from typing import TextIO

from importer.core.models import RowIssue

REPORT_COLUMNS = ("line", "column", "reason", "severity", "value")

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
