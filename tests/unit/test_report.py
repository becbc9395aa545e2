"""The error report: formula neutralization and CSV shape."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator

import pytest

from importer.core.models import Reason, RowIssue, Severity
from importer.core.report import neutralize, write_csv_report


@pytest.mark.parametrize("cell", ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "\x00x"])
def test_formula_cells_are_prefixed(cell: str) -> None:
    assert neutralize(cell) == "'" + cell


@pytest.mark.parametrize("cell", ["", "Ana", "1+1", "'already"])
def test_plain_cells_are_kept(cell: str) -> None:
    assert neutralize(cell) == cell


async def test_report_has_header_and_neutralized_values() -> None:
    async def issues() -> AsyncIterator[RowIssue]:
        yield RowIssue(2, "cpf", Reason.INVALID_CPF, '=HYPERLINK("x")', Severity.INVALID)
        yield RowIssue(3, None, Reason.TOO_FEW_FIELDS, None, Severity.INVALID)

    out = io.StringIO()
    assert await write_csv_report(issues(), out) == 2
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert rows[0] == ["line", "column", "reason", "severity", "value"]
    assert rows[1] == ["2", "cpf", "invalid_cpf", "invalid", '\'=HYPERLINK("x")']
    assert rows[2] == ["3", "", "too_few_fields", "invalid", ""]
