"""Records → rows → batches: chunks of ``chunk_size`` records split by key partition.

:class:`Chunker` finds the header (or plans by position or JSON keys, by the layout), builds
each record's row and issues with a :class:`~importer.core.rows.RowBuilder` (or its compiled twin
``importer.core._rows.FastRowBuilder``, where built, when ``PipelineConfig.compiled``) and cuts
chunks into one batch per partition: a row's is ``crc32(key) % n``, stable across runs,
processes and versions, where a channel key's rows hash their stored contact's group instead
(:class:`~importer.core.keys.KeyGroups`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from importer.core.config import PipelineConfig
from importer.core.errors import FileRejectedError
from importer.core.keys import NO_GROUPS, KeyGroups
from importer.core.layout import RowPlan, plan_for_header, plan_for_keys, plan_for_positions
from importer.core.models import (
    Batch,
    Checkpoint,
    ContactRow,
    InputFormat,
    Job,
    Reason,
    RowIssue,
)
from importer.core.rows import RowBuilder, record_issue
from importer.read.records import JsonRecord, RawRecord

if TYPE_CHECKING:
    from importer.core._rows import FastRowBuilder

    _Builder = RowBuilder | FastRowBuilder


@functools.cache
def compiled_builder() -> type[FastRowBuilder] | None:
    """The compiled row builder, or None when the extension is not built. Imported on the first
    run that asks for it, not with this module: building its phone tables takes ~30 ms, which
    every start of the command line would pay."""
    try:
        from importer.core._rows import FastRowBuilder
    except ImportError:  # the extension is not built: the pure builder everywhere
        return None
    return FastRowBuilder


class Chunker:
    """Records → batches: finds the header, builds rows, cuts chunks of ``chunk_size`` records.

    Pure apart from asking for custom fields: :attr:`new_custom_names` lists the names seen since
    the last call of :meth:`take_new_custom_names`, so the caller can create them first.
    """

    def __init__(self, job: Job, config: PipelineConfig, groups: KeyGroups = NO_GROUPS) -> None:
        self._job = job
        self._config = config
        self._buffer = _ChunkBuffer(job.partitions, groups)
        self._csv_builder: _Builder | None = None
        self._json_builders: dict[tuple[str, ...], _Builder] = {}
        self._known_custom: set[str] = set()
        self._new_custom: list[str] = []
        self.header_seen = False

    @property
    def chunks(self) -> int:
        """Chunks cut so far (numbered on from a checkpoint)."""
        return self._buffer.chunk_no

    def take_new_custom_names(self) -> list[str]:
        names, self._new_custom = self._new_custom, []
        return names

    def feed(self, records: Iterable[RawRecord | JsonRecord]) -> list[Batch]:
        batches: list[Batch] = []
        size = self._job.chunk_size
        buffer = self._buffer
        for record in records:
            if isinstance(record, JsonRecord):
                row, issues = self._json_row(record)
            elif self._csv_builder is None and self._start_csv(record):
                continue
            else:
                row, issues = self._csv_row(record)
            buffer.add(record, row, issues)
            if buffer.count >= size:
                batches.extend(buffer.cut())
        return batches

    def resume(self, checkpoint: Checkpoint, first: RawRecord | JsonRecord | None) -> bool:
        """Go on after ``checkpoint``: build the CSV plan from the file's first record (header
        or row; not counted: it lies before the checkpoint). False: no first record to plan by."""
        if self._job.input_format is not InputFormat.JSONL:
            if not isinstance(first, RawRecord) or first.fields is None:
                return False
            self._start_csv(first)
        self.header_seen = True
        self._buffer.chunk_no = checkpoint.chunk_no + 1
        return True

    def finish(self) -> list[Batch]:
        if self._job.input_format is not InputFormat.JSONL and not self.header_seen:
            raise FileRejectedError(Reason.EMPTY_FILE, "the file has no records")
        return self._buffer.cut() if self._buffer.count else []

    def _start_csv(self, record: RawRecord) -> bool:
        """Build the plan from the header (True: the record was the header) or by position."""
        layout = self._config.layout
        if record.fields is None:
            raise FileRejectedError(
                record.reason or Reason.INVALID_ENCODING,
                f"the header on line {record.line} is unreadable",
            )
        self.header_seen = True
        if layout is not None and not layout.has_header:
            plan = plan_for_positions(len(record.fields), layout)
            self._csv_builder = self._builder(plan)
            return False
        plan = plan_for_header(record.fields, layout, self._config.limits.max_columns)
        self._csv_builder = self._builder(plan)
        return True

    def _builder(self, plan: RowPlan) -> _Builder:
        for name in plan.custom_names:
            if name.lower() not in self._known_custom:
                self._known_custom.add(name.lower())
                self._new_custom.append(name)
        fast = compiled_builder() if self._config.compiled else None
        return (fast or RowBuilder)(
            plan,
            international=self._config.international,
            max_value_chars=self._config.limits.max_value_chars,
        )

    def _csv_row(self, record: RawRecord) -> tuple[ContactRow | None, list[RowIssue]]:
        if record.fields is None:
            return None, [
                record_issue(record.line, record.reason or Reason.INVALID_ENCODING, record.raw)
            ]
        assert self._csv_builder is not None
        return self._csv_builder.build(record.line, record.fields)

    def _json_row(self, record: JsonRecord) -> tuple[ContactRow | None, list[RowIssue]]:
        self.header_seen = True
        if record.values is None:
            return None, [
                record_issue(record.line, record.reason or Reason.MALFORMED_JSON, record.raw)
            ]
        keys = tuple(record.values)
        builder = self._json_builders.get(keys)
        if builder is None:
            builder = self._builder(plan_for_keys(keys, self._config.layout))
            if len(self._json_builders) < 1024:  # bounded: hostile files vary their keys
                self._json_builders[keys] = builder
        return builder.build(record.line, list(record.values.values()))


@dataclass(slots=True)
class _ChunkBuffer:
    """The chunk being filled: valid rows per partition, the issues and the invalid count."""

    partitions: int
    groups: KeyGroups = NO_GROUPS
    chunk_no: int = 0
    first_line: int = 0
    end_offset: int = 0
    end_line: int = 0
    count: int = 0
    invalid: int = 0
    rows: list[list[ContactRow]] = field(default_factory=list)
    issues: list[RowIssue] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rows = [[] for _ in range(self.partitions)]

    def add(
        self, record: RawRecord | JsonRecord, row: ContactRow | None, issues: list[RowIssue]
    ) -> None:
        if self.count == 0:
            self.first_line = record.line
        self.count += 1
        self.end_offset = record.end_offset
        self.end_line = record.end_line
        if issues:
            self.issues.extend(issues)
        if row is None:
            self.invalid += 1
        else:
            self.rows[self.groups.partition(row.cpf_cnpj, self.partitions)].append(row)

    def cut(self) -> list[Batch]:
        """The chunk's batches, one per partition (empty ones too: every partition marks it)."""
        batches = [
            Batch(
                chunk_no=self.chunk_no,
                partition=p,
                first_line=self.first_line,
                end_offset=self.end_offset,
                rows=tuple(rows),
                issues=tuple(self.issues) if p == 0 else (),
                invalid=self.invalid if p == 0 else 0,
                end_line=self.end_line,
            )
            for p, rows in enumerate(self.rows)
        ]
        self.chunk_no += 1
        self.count = self.invalid = 0
        self.rows = [[] for _ in range(self.partitions)]
        self.issues = []
        return batches
