"""A history query (``GET /v1/imports``, ``importer history``) validated, and its page.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from importer.core.models import JobStatus, JobView
from importer.core.options import NUL_MESSAGE, Problems, parse_int

# History page sizes: enough for a screen, small enough that a page is one cheap index scan.
DEFAULT_PAGE = 20
MAX_PAGE = 100


@dataclass(frozen=True, slots=True)
class HistoryQuery:
    user_id: str | None = None
    statuses: tuple[JobStatus, ...] = ()
    cursor: str | None = None
    limit: int = DEFAULT_PAGE


def parse_history_query(
    user_id: str | None, statuses: Sequence[str], cursor: str | None, limit: str | None
) -> HistoryQuery:
    problems = Problems()
    if user_id is not None and "\x00" in user_id:
        problems.add("user_id", NUL_MESSAGE)
    parsed: list[JobStatus] = []
    for status in statuses:
        try:
            parsed.append(JobStatus(status))
        except ValueError:
            problems.add("status", f"unknown status {status[:40]!r}")
    size = DEFAULT_PAGE
    if limit is not None:
        try:
            size = parse_int(limit, 1, MAX_PAGE)
        except ValueError as exc:
            problems.add("limit", str(exc))
    problems.raise_any()
    return HistoryQuery(user_id or None, tuple(dict.fromkeys(parsed)), cursor or None, size)


@dataclass(frozen=True, slots=True)
class Page:
    items: list[JobView]
    next_cursor: str | None
