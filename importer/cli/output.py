"""What the command line shows: the live progress bar, the import's summary (a table or one
JSON document), and the tables of ``importer status`` and ``importer history``."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Mapping

import orjson
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.table import Table
from rich.text import Text

from importer.core.columns import ColumnTarget
from importer.core.models import Counters
from importer.core.progress import Phase, RateWindow, eta_seconds, format_eta, run_phase
from importer.services import maintenance
from importer.services.columns import ColumnsStep
from importer.services.local import ImportOutcome


class TerminalProgress:
    """A live bar: phase, rows, rows/s and ETA over the last few seconds
    (importer/core/progress.py, as the API shows them) and invalid rows so far; updated per
    batch."""

    def __init__(self, console: Console) -> None:
        self._bar = Progress(
            TextColumn("[bold]{task.fields[phase]:<10}"),
            BarColumn(),
            TextColumn("{task.fields[rows]:>12,} rows"),
            TextColumn("{task.fields[rate]:>9,.0f} rows/s"),
            TextColumn("ETA {task.fields[eta]:>9}"),
            TextColumn("invalid {task.fields[invalid]:,}"),
            console=console,
            transient=True,
        )
        self._task: TaskID | None = None
        self._total: int | None = None
        self._window = RateWindow(time.perf_counter())

    @property
    def console(self) -> Console:
        """Where to print above the live bar."""
        return self._bar.console

    def __enter__(self) -> TerminalProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def on_start(self, bytes_total: int | None) -> None:
        self._window = RateWindow(time.perf_counter())
        self._total = bytes_total
        self._task = self._bar.add_task(
            "import",
            total=bytes_total,
            phase=Phase.READING.value,
            rows=0,
            rate=0.0,
            eta=format_eta(None),
            invalid=0,
        )

    def on_batch(self, counters: Counters, bytes_read: int) -> None:
        if self._task is None:
            return
        now = time.perf_counter()
        self._window.add(now, counters.rows_read, bytes_read)
        rows_per_s, bytes_per_s = self._window.rates(now)
        read_to_end = self._total is not None and bytes_read >= self._total
        phase = run_phase(running=True, batches_done=True, read_to_end=read_to_end)
        self._bar.update(
            self._task,
            completed=bytes_read,
            phase=phase.value if phase is not None else "",
            rows=counters.rows_read,
            rate=rows_per_s,
            eta=format_eta(eta_seconds(bytes_read, self._total, bytes_per_s)),
            invalid=counters.invalid,
        )


def outcome_document(outcome: ImportOutcome) -> dict[str, object]:
    c = outcome.counters
    document: dict[str, object] = {
        "job_id": str(outcome.job_id),
        "status": outcome.status.value,
        **dataclasses.asdict(c),
        "elapsed_s": round(outcome.elapsed_s, 3),
        "rows_per_s": round(c.rows_read / outcome.elapsed_s, 1) if outcome.elapsed_s else 0.0,
        "cpu_s": round(time.process_time(), 2),
    }
    if outcome.fail_reason is not None:
        document["fail_reason"] = outcome.fail_reason
    if outcome.warnings:
        document["warnings"] = [
            {"code": w.code.value, "message": w.message} for w in outcome.warnings
        ]
    if outcome.validation is not None:
        document["validation"] = outcome.validation
    if outcome.preview is not None:
        document["preview"] = outcome.preview
    if outcome.counters_differ is not None:
        document["counters_differ_from_preview"] = outcome.counters_differ
    return document


def summary_table(outcome: ImportOutcome) -> Table:
    table = Table(title=f"import {outcome.job_id}", show_header=False)
    for key, value in outcome_document(outcome).items():
        if key == "warnings":
            for warning in outcome.warnings:
                table.add_row(f"warning: {warning.code.value}", warning.message, style="yellow")
            continue
        if isinstance(value, Mapping):  # the preview (without its sample) and the validation
            shown = {k: v for k, v in value.items() if k not in ("sample", "version")}
            for name, text in flat_fields(shown, f"{key}."):
                table.add_row(name, text)
            continue
        table.add_row(key, f"{value:,}" if isinstance(value, int) else str(value))
    return table


def flat_fields(document: Mapping[str, object], prefix: str = "") -> list[tuple[str, str]]:
    """A document's fields as (name, text) rows, nested ones as ``parent.child``; absent values
    (None, empty lists) left out. Whatever fields the document has are shown."""
    rows: list[tuple[str, str]] = []
    for key, value in document.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            rows.extend(flat_fields(value, f"{name}."))
        elif value is None or value in ([], ()):
            continue
        elif isinstance(value, bool):
            rows.append((name, "yes" if value else "no"))
        elif isinstance(value, int):
            rows.append((name, f"{value:,}"))
        elif isinstance(value, list | tuple):
            rows.append((name, ", ".join(_text(v) for v in value)))
        else:
            rows.append((name, _text(value)))
    return rows


def _text(value: object) -> str:
    if isinstance(value, Mapping | list):
        return orjson.dumps(value).decode()
    return str(value)


def status_table(document: Mapping[str, object]) -> Table:
    table = Table(title=f"import {document.get('id', '')}", show_header=False)
    for name, text in flat_fields(document):
        table.add_row(name, text)
    return table


HISTORY_COLUMNS = ("id", "client", "user", "status", "file", "rows", "%", "created (UTC)")


def history_row(item: Mapping[str, object]) -> tuple[str, ...]:
    counters = item.get("counters")
    progress = item.get("progress")
    rows = counters.get("rows_read") if isinstance(counters, Mapping) else None
    percent = progress.get("percent") if isinstance(progress, Mapping) else None
    cells = (
        item.get("id"),
        item.get("client_id"),
        item.get("user_id"),
        item.get("status"),
        item.get("filename"),
        f"{rows:,}" if isinstance(rows, int) else rows,
        percent,
        _minute(item.get("created_at")),
    )
    return tuple("" if cell is None else str(cell) for cell in cells)


def _minute(moment: object) -> object:
    """An ISO 8601 time to the minute, for a table cell."""
    if not isinstance(moment, str):
        return moment
    try:
        parsed = dt.datetime.fromisoformat(moment)
    except ValueError:
        return moment
    return parsed.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M")


def history_table(document: Mapping[str, object]) -> Table:
    table = Table(title="imports, newest first")
    for column in HISTORY_COLUMNS:
        table.add_column(column, no_wrap=column in ("id", "status", "created (UTC)"))
    items = document.get("items")
    for item in items if isinstance(items, list) else []:
        table.add_row(*history_row(item))
    if document.get("more"):
        table.caption = "more: raise --limit or filter"
    return table


COLUMNS_COLUMNS = ("#", "header", "samples", "suggested", "why", "confidence", "as it stands")


def _target_text(target: ColumnTarget) -> str:
    shown = target.kind.value
    if target.field_name is not None:
        number = "" if target.field_id is None else f" #{target.field_id}"
        shown += f" {target.field_name!r}{number}"
    return shown


def columns_table(step: ColumnsStep) -> Table:
    """``importer inspect``: one row per column, the suggestion and why, and what the import
    does with the column as it stands (blank when that is the suggestion)."""
    table = Table(title="columns")
    for name in COLUMNS_COLUMNS:
        table.add_column(name, overflow="fold")
    for view, target in zip(step.columns, step.targets, strict=True):
        suggestion = view.suggestion
        why = suggestion.reason.value
        if suggestion.share is not None:
            why += f" ({suggestion.share:.0%} of samples)"
        cells = (
            str(view.column.position),
            view.column.header,
            " | ".join(view.column.samples),
            _target_text(suggestion.target),
            why,
            f"{suggestion.confidence:.2f}",
            "" if target == suggestion.target else _target_text(target),
        )
        table.add_row(*(Text(cell) for cell in cells))  # a file's text is never markup
    return table


def maintenance_document(
    previews_expired: int, undos_failed: int, swept: maintenance.Swept, webhook_attempts: int
) -> dict[str, int]:
    """``importer maintenance --json``: what each sweep did."""
    return {
        "previews_expired": previews_expired,
        "undos_failed": undos_failed,
        **dataclasses.asdict(swept),
        "webhook_attempts": webhook_attempts,
    }


def maintenance_line(document: Mapping[str, int]) -> str:
    """``importer maintenance``'s one summary line."""
    return (
        f"importer: maintenance: {document['previews_expired']} previews expired,"
        f" {document['undos_failed']} stale undos failed;"
        f" {document['jobs']} imports purged ({document['objects']} files,"
        f" {document['raw_values']} raw values, {document['journal_rows']} journal rows,"
        f" {document['ledger_rows']} ledger rows); {document['outbox']} outbox messages and"
        f" {document['webhooks']} webhook deliveries deleted;"
        f" {document['webhook_attempts']} webhook attempts"
    )
