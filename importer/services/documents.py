"""The job document every edge shows (status, counters, progress, ETA) and the history cursor."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import uuid
from dataclasses import asdict, dataclass

import orjson

from importer.core import preview, progress
from importer.core.errors import (
    InvalidRequestError,
)
from importer.core.lifecycle import RUNNING_STATUSES
from importer.core.models import TERMINAL_STATUSES, JobStatus, JobView


def percent_done(view: JobView) -> float | None:
    if view.status in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_PLACEHOLDERS):
        return 100.0
    if not view.bytes_total:
        return None
    return round(min(view.bytes_read / view.bytes_total, 1.0) * 100, 1)


@dataclass(frozen=True, slots=True)
class LiveProgress:
    """What a watcher sees of a running job (core/progress.py); all None when not running."""

    phase: progress.Phase | None = None
    rows_per_s: float | None = None
    eta_s: float | None = None


def live_progress(view: JobView, now: dt.datetime) -> LiveProgress:
    """The phase, the rows/s over the last few seconds and the ETA at the recent byte rate (none
    for a preview resting in ``ready``: nothing runs until its apply)."""
    if view.status not in RUNNING_STATUSES or view.awaiting_apply:
        return LiveProgress()
    phase = progress.run_phase(
        running=True, batches_done=view.batches_done, read_to_end=view.read_to_end
    )
    span = progress.window_seconds(view.started_at, now)
    bytes_per_s = progress.per_second(view.recent_bytes, span)
    return LiveProgress(
        phase,
        progress.per_second(view.recent_rows, span),
        progress.eta_seconds(view.bytes_read, view.bytes_total, bytes_per_s),
    )


def _iso(moment: dt.datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def job_document(view: JobView, now: dt.datetime) -> dict[str, object]:
    """A job as the API shows it; counters carry the CLI's names."""
    c = view.counters
    live = live_progress(view, now)
    return {
        "id": str(view.id),
        "status": str(view.status),
        "phase": live.phase.value if live.phase is not None else None,
        "queue_position": view.queue_position if view.status is JobStatus.QUEUED else None,
        "conflict_strategy": str(view.conflict_strategy),
        "format": str(view.input_format),
        "filename": view.filename,
        "size": view.source_size,
        "sha256": view.source_sha256,
        "user_id": view.user_id,
        "counters": asdict(c),
        "progress": {
            "rows": view.rows_done,
            "bytes": view.bytes_read,
            "bytes_total": view.bytes_total,
            "percent": percent_done(view),
            "rows_per_s": live.rows_per_s,
        },
        "eta_s": live.eta_s,
        "fail_reason": view.fail_reason,
        "warnings": [{"code": w.code.value, "message": w.message} for w in view.warnings],
        "cancel_requested": view.cancel_requested,
        "journey_id": view.journey_id,
        "tags": list(view.tags or ()),
        "max_invalid": view.max_invalid,
        "duplicates_report": view.duplicates_report,
        "validation": view.validation,
        "preview": view.preview,
        "awaiting_apply": view.awaiting_apply,
        "preview_expires_at": _iso(view.preview_expires_at) if view.awaiting_apply else None,
        # Retention (issue 15): until then its undo and its source-format report are available.
        "undo_available_until": _iso(view.retained_until),
        "source_available_until": _iso(view.retained_until),
        "purged_at": _iso(view.purged_at),
        # The error report's cap: the report's rows counted past it and not stored.
        "report_rows_left_out": view.row_errors_left_out,
        "counters_differ_from_preview": preview.counters_differ(
            view.preview,
            view.counters,
            applied=view.preview_applied,
            ended=view.status in TERMINAL_STATUSES,
        ),
        "created_at": _iso(view.created_at),
        "updated_at": _iso(view.updated_at),
        "started_at": _iso(view.started_at),
        "finished_at": _iso(view.finished_at),
    }


def encode_cursor(created_at: dt.datetime, job_id: uuid.UUID) -> str:
    """An opaque cursor: base64url of the last item's (created_at, id)."""
    raw = orjson.dumps([created_at.isoformat(), str(job_id)])
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[dt.datetime, uuid.UUID]:
    """The position a cursor names; InvalidRequestError for anything we did not issue."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, job_id = orjson.loads(raw)
        moment = dt.datetime.fromisoformat(created)
        position = (moment, uuid.UUID(job_id))
    except (binascii.Error, ValueError, TypeError, orjson.JSONDecodeError):
        raise InvalidRequestError([("cursor", "is not a cursor this API issued")]) from None
    if moment.tzinfo is None:
        raise InvalidRequestError([("cursor", "is not a cursor this API issued")])
    return position
