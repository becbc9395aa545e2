"""The error report's cap per import (IMPORTER_MAX_ROW_ERRORS, issue 26): a batch takes its
room in ``import_error_tally`` in its own transaction before it writes its issues; past the cap
they are counted as left out, not stored."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from importer.adapters.postgres.pool import Conn
from importer.core import report
from importer.core.models import RowIssue
from importer.sql import queries


async def issues_within_cap(
    conn: Conn, job_id: uuid.UUID, issues: Sequence[RowIssue], cap: int
) -> Sequence[RowIssue]:
    """The issues the job's error report stores, in the caller's transaction: of its invalid
    rows and warnings those that fit under ``cap`` (the rest are counted as left out, see
    import_error_tally), and every ``error`` row."""
    counted = report.capped(issues)
    if not counted:
        return issues
    q = queries()
    await conn.execute(q["open_error_tally"], job_id)
    fits = await conn.fetchval(q["take_error_room"], job_id, len(counted), cap)
    return issues if fits == len(counted) else report.within_cap(issues, fits)
