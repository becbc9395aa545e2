"""The error threshold of an import (``max_invalid``): how many invalid rows it tolerates.

A count (``"100"``: at most 100 invalid rows) or a percentage of the rows read (``"2%"``, up
to two decimals: at most 2% of them). Exceeding it means strictly more: 100 invalid rows pass
``"100"``, 101 do not; 2 of 100 rows pass ``"2%"``, 3 do not. The comparison is exact (integer
arithmetic on hundredths of a percent), so the boundary is the same on every machine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from importer.core.models import Counters

MAX_COUNT = 2**63 - 1
_COUNT = re.compile(r"\d{1,19}")
_PERCENT = re.compile(r"(\d{1,3})(?:\.(\d{1,2}))?%")


@dataclass(frozen=True, slots=True)
class MaxInvalid:
    """At most ``count`` invalid rows, or at most ``basis_points / 100`` % of the rows read."""

    count: int | None = None
    basis_points: int | None = None  # hundredths of a percent: "2.5%" is 250

    def exceeded(self, invalid: int, rows_read: int) -> bool:
        """Whether ``invalid`` of ``rows_read`` rows is more than the threshold allows."""
        if self.count is not None:
            return invalid > self.count
        assert self.basis_points is not None
        return invalid * 10_000 > rows_read * self.basis_points

    def __str__(self) -> str:
        if self.count is not None:
            return str(self.count)
        assert self.basis_points is not None
        whole, hundredths = divmod(self.basis_points, 100)
        return f"{whole}%" if not hundredths else f"{whole}.{hundredths:02d}".rstrip("0") + "%"


def parse_max_invalid(value: object) -> MaxInvalid:
    """``100``, ``"100"`` or ``"2%"`` / ``"0.5%"`` (0 to 100 %) as a threshold; ValueError saying
    what is accepted otherwise."""
    if isinstance(value, bool):
        raise TypeError('must be a count such as 100 or a percentage such as "2%"')
    if isinstance(value, int):
        if not 0 <= value <= MAX_COUNT:
            raise ValueError(f"must be between 0 and {MAX_COUNT}")
        return MaxInvalid(count=value)
    text = str(value).strip()
    if _COUNT.fullmatch(text) and int(text) <= MAX_COUNT:
        return MaxInvalid(count=int(text))
    match = _PERCENT.fullmatch(text)
    if match is not None:
        points = int(match[1]) * 100 + int((match[2] or "0").ljust(2, "0"))
        if points <= 10_000:
            return MaxInvalid(basis_points=points)
    raise ValueError(
        "must be a count (0 or more) such as 100, or a percentage from 0% to 100% with at most "
        'two decimals, such as "2%" or "0.5%"'
    )


def validation(limit: MaxInvalid, invalid: int, rows_read: int) -> dict[str, object]:
    """What the validation of a whole file found, as the job keeps and shows it."""
    return {
        "max_invalid": str(limit),
        "rows_read": rows_read,
        "invalid": invalid,
        "exceeded": limit.exceeded(invalid, rows_read),
    }


def exceeded_detail(found: Mapping[str, object]) -> str:
    """A validation past its threshold, in words (the run's failure detail)."""
    return (
        f"{found['invalid']} invalid rows of {found['rows_read']}: more than max_invalid "
        f"{found['max_invalid']}"
    )


def exceeded_counters(found: Mapping[str, object] | None) -> Counters:
    """The counters of a job whose validation exceeded its threshold (no batch was applied):
    every row read, the invalid ones invalid, the valid ones ignored (none was written).
    Zero for any other job (its batches hold its counters)."""
    if found is None or found.get("exceeded") is not True:
        return Counters()
    rows_read, invalid = found["rows_read"], found["invalid"]
    assert isinstance(rows_read, int)
    assert isinstance(invalid, int)
    return Counters(rows_read=rows_read, invalid=invalid, ignored=rows_read - invalid)
