"""Batch messages: a :class:`Batch` of one job as the bytes of a chunk message, and back.

Pure. The coordinator of an import (the worker holding its lease) publishes each batch; any
instance consumes it. A message names its job and the lease owner that published it (the
consumer's writes are fenced by that owner), and its id is ``job:chunk:partition`` — stable, so
a re-publish or a duplicate is recognized. Decoding trusts nothing: anything but the exact shape
written by :func:`encode` is :class:`MalformedMessageError` (the message goes straight to the
dead-letter queue: it can never be applied, retrying it would not help).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from importer.core.errors import MalformedMessageError
from importer.core.models import Batch, Channel, ContactRow, Detail, Reason, RowIssue, Severity

VERSION = 1
# Largest message accepted: a chunk of the largest allowed size is far below it.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class BatchMessage:
    job_id: uuid.UUID
    owner: str  # the lease owner that published it
    batch: Batch

    @property
    def message_id(self) -> str:
        return message_id(self.job_id, self.batch)


def message_id(job_id: uuid.UUID, batch: Batch) -> str:
    """The batch's stable id: ``job:chunk:partition`` (a split piece is never published)."""
    return f"{job_id}:{batch.chunk_no}:{batch.partition}"


def encode(job_id: uuid.UUID, owner: str, batch: Batch) -> bytes:
    rows = [
        [
            r.line,
            r.cpf_cnpj,
            r.name,
            r.street_address,
            [[int(d.channel), d.value, d.country_code, d.country] for d in r.details],
            [[name, value] for name, value in r.custom_fields],
        ]
        for r in batch.rows
    ]
    issues = [[i.line, i.column, i.reason.value, i.value, i.severity.value] for i in batch.issues]
    return orjson.dumps(
        {
            "v": VERSION,
            "job": str(job_id),
            "owner": owner,
            "chunk": batch.chunk_no,
            "partition": batch.partition,
            "first_line": batch.first_line,
            "end_offset": batch.end_offset,
            "end_line": batch.end_line,
            "invalid": batch.invalid,
            "rows": rows,
            "issues": issues,
        }
    )


def decode(body: bytes) -> BatchMessage:
    """The message written by :func:`encode`; MalformedMessageError for anything else."""
    if len(body) > MAX_MESSAGE_BYTES:
        raise MalformedMessageError(f"message of {len(body)} bytes: over {MAX_MESSAGE_BYTES}")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedMessageError(f"not JSON: {exc}") from exc
    try:
        return _message(doc)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise MalformedMessageError(f"not a batch message: {type(exc).__name__}: {exc}") from exc


def _message(doc: Any) -> BatchMessage:
    if not isinstance(doc, dict) or doc.get("v") != VERSION:
        raise ValueError("unknown message version")
    batch = Batch(
        chunk_no=_int(doc["chunk"]),
        partition=_int(doc["partition"]),
        first_line=_int(doc["first_line"]),
        end_offset=_int(doc["end_offset"]),
        rows=tuple(_row(r) for r in _list(doc["rows"])),
        issues=tuple(_issue(i) for i in _list(doc["issues"])),
        invalid=_int(doc["invalid"]),
        end_line=_int(doc["end_line"]),
    )
    return BatchMessage(uuid.UUID(_str(doc["job"])), _str(doc["owner"]), batch)


def _row(raw: Any) -> ContactRow:
    line, key, name, address, details, custom = _list(raw)
    return ContactRow(
        _int(line),
        _str(key),
        _opt_str(name),
        _opt_str(address),
        tuple(_detail(d) for d in _list(details)),
        tuple(_pair(c) for c in _list(custom)),
    )


def _detail(raw: Any) -> Detail:
    channel, value, country_code, country = _list(raw)
    return Detail(
        Channel(_int(channel)),
        _str(value),
        None if country_code is None else _int(country_code),
        _opt_str(country),
    )


def _pair(raw: Any) -> tuple[str, str]:
    name, value = _list(raw)
    return _str(name), _str(value)


def _issue(raw: Any) -> RowIssue:
    line, column, reason, value, severity = _list(raw)
    return RowIssue(
        _int(line), _opt_str(column), Reason(_str(reason)), _opt_str(value), Severity(severity)
    )


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(f"expected a count, got {value!r}")
    return value


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _opt_str(value: Any) -> str | None:
    return None if value is None else _str(value)
