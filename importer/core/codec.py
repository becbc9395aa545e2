"""Batch messages: a :class:`Batch` of one job as the bytes of a chunk message, and back.

Pure. The coordinator of an import (the worker holding its lease) publishes each batch; any
instance consumes it. A message names its job and the lease owner that published it (the
consumer's writes are fenced by that owner), and its id is ``job:chunk:partition`` — stable, so
a re-publish or a duplicate is recognized. Decoding trusts nothing: anything but the exact shape
written by :func:`encode` is :class:`MalformedMessageError` (the message goes straight to the
dead-letter queue: it can never be applied, retrying it would not help).

Version 2 (written since issue 13) is columnar, so that both ends cost little per row: one JSON
object whose tables hold one array per field, ``rows`` (line, key, name, address, and the count
of each row's details and custom fields), ``details`` and ``custom`` (the rows' values in row
order; custom field names once each in ``names``, referred to by index), ``issues``::

    {"v": 2, "job": "<uuid>", "owner": "<lease owner>", "chunk": 3, "partition": 1,
     "part": 1, "first_line": 10, "end_offset": 99, "end_line": 12, "invalid": 1,
     "rows": {"line": [10], "key": ["52998224725"], "name": ["Ana"], "address": [null],
              "details": [1], "custom": [1]},
     "details": {"channel": [3], "value": ["ana@x.br"], "country_code": [null],
                 "country": [null]},
     "custom": {"names": ["plano"], "name": [0], "value": ["Gold"]},
     "issues": {"line": [11], "column": ["cpf"], "reason": ["invalid_cpf"],
                "value": ["123"], "severity": ["invalid"]}}

Each array is checked whole (exact types, counts that add up, texts within the limit, indexes
in range, every name used once), then the objects are made. Version 1 (one list per row) is
still decoded — messages left in the retry, wait and dead-letter queues by an older version
apply after an upgrade — but never written: an instance of an older version dead-letters a
version 2 message, so every instance of a deployment runs the same version (stop them all, then
start the new one) rather than a rolling upgrade.

``importer/core/_codec.pyx`` is the compiled twin of :func:`encode` and :func:`decode` (same
bytes, same batches, the same inputs refused); :func:`implementation` picks one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import chain, islice, repeat
from operator import attrgetter, itemgetter
from typing import Any, Final, NamedTuple

import orjson

from importer.core import codec_v1
from importer.core.config import MAX_CHUNK_SIZE
from importer.core.errors import MalformedMessageError
from importer.core.models import (
    Batch,
    Channel,
    ContactRow,
    Limits,
    Reason,
    RowIssue,
    Severity,
    new_contact_row,
    new_detail,
)

VERSION = 2
# Largest message accepted: a chunk of the largest allowed size is far below it.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# Most rows (and most issues) in one message: a chunk is far below it (IMPORTER_CHUNK_SIZE).
MAX_BATCH_ROWS = MAX_CHUNK_SIZE
# Every count (a line, an offset, a chunk number) fits a PostgreSQL bigint.
MAX_COUNT = 2**63 - 1
# The longest text accepted is the limits' longest field, but never under this: an issue's
# report value is cut to 1024 characters (core.rows), an e-mail is at most 320.
MIN_TEXT_CHARS = 1024


def text_limit(limits: Limits) -> int:
    """The longest text of a message: no row value or issue value is longer than a field."""
    return max(limits.max_field_chars, MIN_TEXT_CHARS)


_DEFAULT_LIMIT: Final = text_limit(Limits())


@dataclass(frozen=True, slots=True)
class BatchMessage:
    job_id: uuid.UUID
    owner: str  # the lease owner that published it
    batch: Batch
    # The custom field names the batch's rows use, each once (a decoded version 2 message
    # lists them); None: look at the rows.
    custom_names: tuple[str, ...] | None = field(default=None, compare=False, repr=False)

    @property
    def message_id(self) -> str:
        return message_id(self.job_id, self.batch)

    def field_names(self) -> tuple[str, ...]:
        """The custom field names the batch's rows use, each once."""
        if self.custom_names is not None:
            return self.custom_names
        names = chain.from_iterable(map(_CUSTOM_FIELDS, self.batch.rows))
        return tuple(dict.fromkeys(map(_FIRST, names)))


def message_id(job_id: uuid.UUID, batch: Batch) -> str:
    """The batch's stable id: ``job:chunk:partition`` (a split piece is never published)."""
    return f"{job_id}:{batch.chunk_no}:{batch.partition}"


class Implementation(NamedTuple):
    """A codec: the pure one of this module, or the compiled one (``_codec``)."""

    encode: Callable[[uuid.UUID, str, Batch], bytes]
    decode: Callable[..., BatchMessage]  # (body, limits=Limits())
    compiled: bool


def implementation(compiled: bool) -> Implementation:
    """The compiled codec when asked for and built, else this module's."""
    if compiled:
        try:
            from importer.core import _codec  # optional: built by setup.py
        except ImportError:
            pass
        else:
            return Implementation(_codec.encode, _codec.decode, compiled=True)
    return PURE


# ------------------------------------------------------------------------------ encoding

_LINE: Final = attrgetter("line")
_KEY: Final = attrgetter("cpf_cnpj")
_NAME: Final = attrgetter("name")
_ADDRESS: Final = attrgetter("street_address")
_DETAILS: Final = attrgetter("details")
_CUSTOM_FIELDS: Final = attrgetter("custom_fields")
_CHANNEL: Final = attrgetter("channel")
_VALUE: Final = attrgetter("value")
_COUNTRY_CODE: Final = attrgetter("country_code")
_COUNTRY: Final = attrgetter("country")
_COLUMN: Final = attrgetter("column")
_REASON: Final = attrgetter("reason")
_SEVERITY: Final = attrgetter("severity")
_FIRST: Final = itemgetter(0)
_SECOND: Final = itemgetter(1)


def encode(job_id: uuid.UUID, owner: str, batch: Batch) -> bytes:
    """The version 2 message of ``batch`` (whole-array operations: no Python loop per row)."""
    rows = batch.rows
    details = list(chain.from_iterable(map(_DETAILS, rows)))
    pairs = list(chain.from_iterable(map(_CUSTOM_FIELDS, rows)))
    pair_names = list(map(_FIRST, pairs))
    names = list(dict.fromkeys(pair_names))  # in order of first use
    index = {name: i for i, name in enumerate(names)}
    issues = batch.issues
    return orjson.dumps(
        {
            "v": VERSION,
            "job": str(job_id),
            "owner": owner,
            "chunk": batch.chunk_no,
            "partition": batch.partition,
            "part": batch.part,
            "first_line": batch.first_line,
            "end_offset": batch.end_offset,
            "end_line": batch.end_line,
            "invalid": batch.invalid,
            "rows": {
                "line": list(map(_LINE, rows)),
                "key": list(map(_KEY, rows)),
                "name": list(map(_NAME, rows)),
                "address": list(map(_ADDRESS, rows)),
                "details": list(map(len, map(_DETAILS, rows))),
                "custom": list(map(len, map(_CUSTOM_FIELDS, rows))),
            },
            "details": {
                "channel": list(map(_CHANNEL, details)),
                "value": list(map(_VALUE, details)),
                "country_code": list(map(_COUNTRY_CODE, details)),
                "country": list(map(_COUNTRY, details)),
            },
            "custom": {
                "names": names,
                "name": list(map(index.__getitem__, pair_names)),
                "value": list(map(_SECOND, pairs)),
            },
            "issues": {
                "line": list(map(_LINE, issues)),
                "column": list(map(_COLUMN, issues)),
                "reason": list(map(_REASON, issues)),
                "value": list(map(_VALUE, issues)),
                "severity": list(map(_SEVERITY, issues)),
            },
        }
    )


# ------------------------------------------------------------------------------ decoding

# The exact keys of a version 2 message and of its tables.
KEYS: Final = frozenset(
    {
        "v",
        "job",
        "owner",
        "chunk",
        "partition",
        "part",
        "first_line",
        "end_offset",
        "end_line",
        "invalid",
        "rows",
        "details",
        "custom",
        "issues",
    }
)
ROW_KEYS: Final = frozenset({"line", "key", "name", "address", "details", "custom"})
DETAIL_KEYS: Final = frozenset({"channel", "value", "country_code", "country"})
CUSTOM_KEYS: Final = frozenset({"names", "name", "value"})
ISSUE_KEYS: Final = frozenset({"line", "column", "reason", "value", "severity"})

CHANNELS: Final = {int(c): c for c in Channel}
REASONS: Final = {r.value: r for r in Reason}
SEVERITIES: Final = {s.value: s for s in Severity}

_INT: Final[frozenset[type]] = frozenset({int})
_STR: Final[frozenset[type]] = frozenset({str})
_OPT_INT: Final[frozenset[type]] = frozenset({int, type(None)})
_OPT_STR: Final[frozenset[type]] = frozenset({str, type(None)})


def decode(body: bytes, limits: Limits | None = None) -> BatchMessage:
    """The message written by :func:`encode` (or by version 1); MalformedMessageError for
    anything else. Texts are at most :func:`text_limit` of ``limits`` (default ``Limits()``)."""
    doc = load(body)
    limit = _DEFAULT_LIMIT if limits is None else text_limit(limits)
    try:
        return _versioned(doc, limit)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise MalformedMessageError(f"not a batch message: {type(exc).__name__}: {exc}") from exc


def _versioned(doc: Any, limit: int) -> BatchMessage:
    if type(doc) is dict:
        version = doc.get("v")
        if type(version) is int and version == VERSION:
            return _message(doc, limit)
        if type(version) is int and version == 1:
            return BatchMessage(*codec_v1.message_v1(doc))
    raise ValueError("unknown message version")


def load(body: bytes) -> Any:
    """The JSON document of a message no larger than MAX_MESSAGE_BYTES."""
    if len(body) > MAX_MESSAGE_BYTES:
        raise MalformedMessageError(f"message of {len(body)} bytes: over {MAX_MESSAGE_BYTES}")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedMessageError(f"not JSON: {exc}") from exc


def _message(doc: dict[str, Any], limit: int) -> BatchMessage:
    if doc.keys() != KEYS:
        raise ValueError(f"fields {sorted(doc.keys() ^ KEYS)} unexpected or missing")
    rows, names = _rows(doc, limit)
    part = _count(doc["part"])
    if part < 1:
        raise ValueError(f"part {part}")
    batch = Batch(
        chunk_no=_count(doc["chunk"]),
        partition=_count(doc["partition"]),
        first_line=_count(doc["first_line"]),
        end_offset=_count(doc["end_offset"]),
        rows=rows,
        issues=_issues(doc["issues"], limit),
        invalid=_count(doc["invalid"]),
        part=part,
        end_line=_count(doc["end_line"]),
    )
    job_id = uuid.UUID(_text(doc["job"], limit))
    return BatchMessage(job_id, _text(doc["owner"], limit), batch, names)


def _rows(doc: dict[str, Any], limit: int) -> tuple[tuple[ContactRow, ...], tuple[str, ...]]:
    """The rows of the three tables, and the custom field names they use."""
    rows = _table(doc["rows"], ROW_KEYS)
    lines = _counts(rows["line"], None)
    n = len(lines)
    keys = _texts(rows["key"], n, limit, _STR)
    names = _texts(rows["name"], n, limit, _OPT_STR)
    addresses = _texts(rows["address"], n, limit, _OPT_STR)
    detail_counts = _counts(rows["details"], n)
    custom_counts = _counts(rows["custom"], n)

    details = _table(doc["details"], DETAIL_KEYS)
    channels = _counts(details["channel"], sum(detail_counts))
    d = len(channels)
    values = _texts(details["value"], d, limit, _STR)
    country_codes = _counts(details["country_code"], d, _OPT_INT)
    countries = _texts(details["country"], d, limit, _OPT_STR)

    custom = _table(doc["custom"], CUSTOM_KEYS)
    fields = _texts(custom["names"], None, limit, _STR)
    indexes = _counts(custom["name"], sum(custom_counts))
    custom_values = _texts(custom["value"], len(indexes), limit, _STR)
    if len(set(fields)) != len(fields) or len(set(indexes)) != len(fields):
        raise ValueError("custom field names repeated or unused")

    made = map(new_detail, map(CHANNELS.__getitem__, channels), values, country_codes, countries)
    row_details = _runs(iter(list(made)), detail_counts)
    row_custom = _runs(
        zip(map(fields.__getitem__, indexes), custom_values, strict=True), custom_counts
    )
    made_rows = map(new_contact_row, lines, keys, names, addresses, row_details, row_custom)
    return tuple(made_rows), tuple(fields)


def _issues(value: Any, limit: int) -> tuple[RowIssue, ...]:
    issues = _table(value, ISSUE_KEYS)
    lines = _counts(issues["line"], None)
    n = len(lines)
    columns = _texts(issues["column"], n, limit, _OPT_STR)
    reasons = map(REASONS.__getitem__, _texts(issues["reason"], n, limit, _STR))
    values = _texts(issues["value"], n, limit, _OPT_STR)
    severities = map(SEVERITIES.__getitem__, _texts(issues["severity"], n, limit, _STR))
    return tuple(map(RowIssue, lines, columns, list(reasons), values, list(severities)))


def _runs(items: Iterator[Any], counts: list[int]) -> Iterator[tuple[Any, ...]]:
    """Consecutive runs of ``items``, ``counts[i]`` long, as tuples (lazily, in C)."""
    return map(tuple, map(islice, repeat(items), counts))


def _table(value: Any, keys: frozenset[str]) -> dict[str, Any]:
    if type(value) is not dict or value.keys() != keys:
        raise ValueError(f"expected a table of {sorted(keys)}")
    return value


def _column(value: Any, length: int | None) -> list[Any]:
    """A JSON array, of ``length`` items if given, at most MAX_BATCH_ROWS for a first one."""
    if type(value) is not list:
        raise TypeError(f"expected an array, got {type(value).__name__}")
    if length is None:
        if len(value) > MAX_BATCH_ROWS:
            raise ValueError(f"{len(value)} items: over {MAX_BATCH_ROWS}")
    elif len(value) != length:
        raise ValueError(f"{len(value)} items, expected {length}")
    return value


def _counts(value: Any, length: int | None, types: frozenset[type] = _INT) -> list[Any]:
    """An array of counts (ints 0..MAX_COUNT; None too if ``types`` says so)."""
    column = _column(value, length)
    if column:
        if not set(map(type, column)) <= types:
            raise TypeError("expected counts")
        present = column if types is _INT else [v for v in column if v is not None]
        if present and (min(present) < 0 or max(present) > MAX_COUNT):
            raise ValueError("a count out of range")
    return column


def _texts(value: Any, length: int | None, limit: int, types: frozenset[type]) -> list[Any]:
    """An array of texts of at most ``limit`` characters (None too if ``types`` says so)."""
    column = _column(value, length)
    if column:
        if not set(map(type, column)) <= types:
            raise TypeError("expected texts")
        present = column if types is _STR else filter(None, column)
        if max(map(len, present), default=0) > limit:
            raise ValueError(f"a text over {limit} characters")
    return column


def _count(value: Any) -> int:
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise TypeError(f"expected a count, got {value!r}")
    return value


def _text(value: Any, limit: int) -> str:
    if type(value) is not str or len(value) > limit:
        raise TypeError("expected a text")
    return value


PURE: Final = Implementation(encode, decode, compiled=False)
