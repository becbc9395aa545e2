"""Version 1 chunk messages (one JSON list per row), as decoded since version 2 is written.

Pure. Messages an older version left in the retry, wait and dead-letter queues still apply
after an upgrade; nothing writes this version any more (``codec`` writes version 2).
"""

from __future__ import annotations

import uuid
from typing import Any

from importer.core.models import Batch, Channel, ContactRow, Detail, Reason, RowIssue, Severity


def message_v1(doc: dict[str, Any]) -> tuple[uuid.UUID, str, Batch]:
    """A version 1 message (one list per row): its job, owner and batch (KeyError, TypeError,
    ValueError or IndexError when it is not one)."""
    batch = Batch(
        chunk_no=_int(doc["chunk"]),
        partition=_int(doc["partition"]),
        first_line=_int(doc["first_line"]),
        end_offset=_int(doc["end_offset"]),
        rows=tuple(_row_v1(r) for r in _list(doc["rows"])),
        issues=tuple(_issue_v1(i) for i in _list(doc["issues"])),
        invalid=_int(doc["invalid"]),
        end_line=_int(doc["end_line"]),
    )
    return uuid.UUID(_str(doc["job"])), _str(doc["owner"]), batch


def _row_v1(raw: Any) -> ContactRow:
    line, key, name, address, details, custom = _list(raw)
    return ContactRow(
        _int(line),
        _str(key),
        _opt_str(name),
        _opt_str(address),
        tuple(_detail_v1(d) for d in _list(details)),
        tuple(_pair_v1(c) for c in _list(custom)),
    )


def _detail_v1(raw: Any) -> Detail:
    channel, value, country_code, country = _list(raw)
    return Detail(
        Channel(_int(channel)),
        _str(value),
        None if country_code is None else _int(country_code),
        _opt_str(country),
    )


def _pair_v1(raw: Any) -> tuple[str, str]:
    name, value = _list(raw)
    return _str(name), _str(value)


def _issue_v1(raw: Any) -> RowIssue:
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
