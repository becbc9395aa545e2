"""The error report's cap (issue 26): which of a batch's issues count against it, and which are
kept when only some fit."""

from __future__ import annotations

from importer.core.models import Reason, RowIssue, Severity
from importer.core.report import capped, within_cap


def _issue(line: int, severity: Severity) -> RowIssue:
    reason = {
        Severity.INVALID: Reason.INVALID_CPF,
        Severity.WARNING: Reason.INVALID_EMAIL,
        Severity.ERROR: Reason.CHUNK_DISCARDED,
    }[severity]
    return RowIssue(line, None, reason, "x", severity)


ISSUES = [
    _issue(2, Severity.INVALID),
    _issue(3, Severity.ERROR),
    _issue(4, Severity.WARNING),
    _issue(5, Severity.INVALID),
]


def test_invalid_rows_and_warnings_count_a_discarded_batchs_rows_do_not() -> None:
    assert [i.line for i in capped(ISSUES)] == [2, 4, 5]


def test_the_first_that_fit_are_kept_in_order_and_every_error_row() -> None:
    assert [i.line for i in within_cap(ISSUES, 0)] == [3]
    assert [i.line for i in within_cap(ISSUES, 2)] == [2, 3, 4]
    assert within_cap(ISSUES, 3) == ISSUES
