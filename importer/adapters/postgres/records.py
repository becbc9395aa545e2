"""Rows ↔ the domain's values: what the statements of this package bind and read back."""

from __future__ import annotations

import datetime as dt
from typing import Any

import asyncpg
import orjson

from importer.core.models import (
    TERMINAL_STATUSES,
    ConflictStrategy,
    Counters,
    InputFormat,
    Job,
    JobStatus,
    JobView,
    JobWarning,
    NewJob,
    Reason,
)

_COUNTERS = ("rows_read", "inserted", "updated", "invalid", "error", "ignored")


def now() -> dt.datetime:
    """The application clock: finalization times come from here, not from the database."""
    return dt.datetime.now(dt.UTC)


def storable_text(value: str | None) -> str | None:
    """Text safe for a PostgreSQL text column (no NUL; undecodable surrogates escaped)."""
    if value is None:
        return None
    cleaned = value.replace("\x00", "\\x00")
    return cleaned.encode("utf-8", "backslashreplace").decode("utf-8")


def counters_of(row: asyncpg.Record, prefix: str = "") -> Counters:
    return Counters(*(row[prefix + name] or 0 for name in _COUNTERS))


def json_of(value: str | None) -> Any:
    return None if value is None else orjson.loads(value)


def warnings_of(value: str | None) -> tuple[JobWarning, ...]:
    """import_job.warnings as JobWarnings (unknown codes skipped: a newer version's)."""
    known = {reason.value for reason in Reason}
    return tuple(
        JobWarning(Reason(w["code"]), str(w["message"]))
        for w in json_of(value) or ()
        if isinstance(w, dict) and w.get("code") in known
    )


def job_values(new_job: NewJob, status: JobStatus) -> tuple[object, ...]:
    """insert_job's parameters, in order."""
    tags = list(new_job.tags) if new_job.tags is not None else None
    return (
        new_job.id,
        new_job.client_id,
        new_job.user_id,
        status.value,
        new_job.source,
        new_job.input_format,
        orjson.dumps(new_job.layout).decode() if new_job.layout is not None else None,
        new_job.strategy,
        new_job.chunk_size,
        new_job.partitions,
        new_job.has_internationalization,
        new_job.bytes_total,
        new_job.journey_id,
        new_job.auto_start_journey_mailing,
        new_job.source_size,
        new_job.source_sha256,
        new_job.filename,
        new_job.has_sensitive_data,
        new_job.has_underage_data,
        new_job.data_processing_purpose,
        new_job.lgpd_processing_hypothesis,
        orjson.dumps(tags).decode() if tags is not None else None,
        new_job.kind,
        new_job.in_process,
        new_job.lease_owner,
        float(new_job.lease_s),
        new_job.local_path,
        new_job.preview,
        new_job.max_invalid,
        new_job.notify_url,
        new_job.duplicates_report,
        new_job.journaled,
    )


def view_from_row(row: asyncpg.Record) -> JobView:
    """A view_job / list_jobs row: ledger counters while running, the row's once terminal."""
    status = JobStatus(row["status"])
    counters = counters_of(row) if status in TERMINAL_STATUSES else counters_of(row, "live_")
    tags = json_of(row["tags"])
    return JobView(
        id=row["id"],
        client_id=row["client_id"],
        user_id=row["user_id"],
        status=status,
        conflict_strategy=ConflictStrategy(row["conflict_strategy"]),
        input_format=InputFormat(row["input_format"]),
        source=row["source"],
        filename=row["filename"],
        source_size=row["source_size"],
        source_sha256=row["source_sha256"],
        counters=counters,
        rows_done=counters.rows_read,
        bytes_read=row["bytes_read"],
        bytes_total=row["bytes_total"],
        fail_reason=row["fail_reason"],
        cancel_requested=row["cancel_requested_at"] is not None,
        journey_id=row["journey_id"],
        tags=tuple(tags) if tags is not None else None,
        last_operation_id=row["last_operation_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        warnings=warnings_of(row["warnings"]),
        batches_done=row["batches_done"],
        read_to_end=row["read_to_end_at"] is not None,
        recent_rows=row["recent_rows"] or 0,
        recent_bytes=row["recent_bytes"] or 0,
        queue_position=row.get("queue_position"),  # a history page's are found after it
        preview=json_of(row["preview"]),
        awaiting_apply=row["awaiting_apply"],
        preview_expires_at=row["preview_expires_at"],
        purged_at=row["purged_at"],
        row_errors_left_out=row["row_errors_left_out"],
        preview_applied=row["preview_applied_at"] is not None,
        max_invalid=row["max_invalid"],
        validation=json_of(row["validation"]),
        duplicates_report=row["duplicates_report"],
    )


def job_from_row(row: asyncpg.Record) -> Job:
    return Job(
        id=row["id"],
        client_id=row["client_id"],
        status=JobStatus(row["status"]),
        strategy=ConflictStrategy(row["conflict_strategy"]),
        source=row["source"],
        input_format=InputFormat(row["input_format"]),
        chunk_size=row["chunk_size"],
        partitions=row["partitions"],
        user_id=row["user_id"],
        fail_reason=row["fail_reason"],
        counters=counters_of(row),
        source_size=row["source_size"],
        source_sha256=row["source_sha256"],
        filename=row["filename"],
        layout=json_of(row["layout"]),
        has_internationalization=row["has_internationalization"],
        lease_owner=row["lease_owner"],
        cancel_requested=row["cancel_requested_at"] is not None,
        journey_id=row["journey_id"],
        warnings=warnings_of(row["warnings"]),
        local_path=row["local_path"],
        preview_requested=row["preview_requested"],
        awaiting_apply=row["awaiting_apply"],
        preview=json_of(row["preview"]),
        max_invalid=row["max_invalid"],
        validation=json_of(row["validation"]),
        preview_applied=row["preview_applied_at"] is not None,
        duplicates_report=row["duplicates_report"],
        journaled=row["journaled"],
    )
