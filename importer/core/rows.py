"""Records → normalized contact rows and row issues, by a row plan.

Pure: no I/O. The hot path is :meth:`RowBuilder.build`, called once per record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from importer.core.keys import DedupeKey, keyed_by_channel
from importer.core.layout import Column, RowPlan
from importer.core.models import (
    Attribute,
    Channel,
    ContactRow,
    Detail,
    Reason,
    RowIssue,
    Severity,
    new_contact_row,
    new_detail,
)
from importer.core.normalize import (
    PhoneParts,
    normalize_cpf_cnpj,
    normalize_email,
    normalize_phone_parts,
)

_MAX_CHANNEL_CHARS = 320


# The row builder's column kinds, in the order build() tests them: customs are the most
# frequent columns, then phones.
_CUSTOM: Final = 0


_PHONE: Final = 1  # phone and whatsapp


_NAME: Final = 2


_ADDRESS: Final = 3


_KEY: Final = 4


_EMAIL: Final = 5


_JOURNEY: Final = 6


_KINDS: Final[dict[Attribute | Channel, int]] = {
    Attribute.CPF_CNPJ: _KEY,
    Attribute.NAME: _NAME,
    Attribute.STREET_ADDRESS: _ADDRESS,
    Channel.PHONE: _PHONE,
    Channel.WHATSAPP: _PHONE,
    Channel.EMAIL: _EMAIL,
    Channel.JOURNEY: _JOURNEY,
}


# A column as the row builder reads it, a plain tuple (named ones unpack slower): the
# field's index in the record, the kind, the column's name (for issues), the channel of its
# details (channel columns; PHONE for others), the custom field's name (custom columns).
_Column = tuple[int, int, str, Channel, str]


def _column(column: Column) -> _Column:
    target = column.target
    mapped = target.attribute or target.channel
    if mapped is None:
        assert target.custom is not None
        return (column.index, _CUSTOM, column.name, Channel.PHONE, target.custom)
    return (column.index, _KINDS[mapped], column.name, target.channel or Channel.PHONE, "")


class RowBuilder:
    """Turns one record's fields into a ContactRow and its issues, following a RowPlan."""

    def __init__(self, plan: RowPlan, *, international: bool, max_value_chars: int) -> None:
        self.plan = plan
        self._international = international
        self._max_value = max_value_chars
        self._columns = tuple(_column(c) for c in plan.columns)
        self._width = max((c.index + 1 for c in plan.columns), default=0)
        self._key_channel = plan.key_channel
        self._key_column = key_column(plan)

    def build(  # noqa: PLR0912, PLR0915 - the hot path: see the comment inside
        self, line: int, fields: Sequence[str]
    ) -> tuple[ContactRow | None, list[RowIssue]]:
        """One record → (row or None when invalid, issues). Never raises on content.

        Issues come in column order, a missing key's first; details and custom fields in
        column order too. An empty (or blank) value is no value.
        """
        expected = self.plan.field_count
        if expected is not None and len(fields) != expected:
            reason = Reason.TOO_MANY_FIELDS if len(fields) > expected else Reason.TOO_FEW_FIELDS
            detail = f"{len(fields)} fields, header has {expected}"
            return None, [RowIssue(line, None, reason, detail, Severity.INVALID)]
        if len(fields) < self._width:  # a record without some columns: their values are empty
            fields = [*fields, *[""] * (self._width - len(fields))]
        # Called once per record: the hot path of an import, hence one long function. Each
        # column's kind is tested in place, in one loop over plain tuples: per-column
        # closures and a per-row state object cost nearly as much as the normalizers
        # (benchmarks/bench_build.py).
        limit = self._max_value
        key: str | Reason | None = None
        name: str | None = None
        street_address: str | None = None
        details: list[Detail] = []
        custom: list[tuple[str, str]] = []
        issues: list[RowIssue] = []
        # A phone column whose value equals the previous phone column's in this row (the
        # whatsapp column often repeats the phone column) reuses its result.
        phone_raw: str | None = None
        phone: PhoneParts | None = None
        for index, kind, column, channel, field in self._columns:
            value = fields[index].strip()
            if not value:
                continue
            if kind == _CUSTOM:
                if len(value) <= limit:
                    custom.append((field, value))
                else:
                    issues.append(_warning(line, column, Reason.VALUE_TOO_LONG, value))
            elif kind == _PHONE:
                if value != phone_raw:
                    phone_raw = value
                    phone = normalize_phone_parts(value, international=self._international)
                if phone is not None:
                    details.append(new_detail(channel, phone[0], phone[1], phone[2]))
                else:
                    issues.append(_warning(line, column, Reason.INVALID_PHONE, value))
            elif kind == _NAME:
                if len(value) <= limit:
                    name = value
                else:
                    issues.append(_warning(line, column, Reason.VALUE_TOO_LONG, value))
            elif kind == _ADDRESS:
                if len(value) <= limit:
                    street_address = value
                else:
                    issues.append(_warning(line, column, Reason.VALUE_TOO_LONG, value))
            elif kind == _KEY:
                key = normalize_cpf_cnpj(value)
                if type(key) is Reason:  # isinstance() is slow on enum classes
                    issues.append(RowIssue(line, column, key, value, Severity.INVALID))
            elif kind == _EMAIL:
                email = normalize_email(value) if len(value) <= _MAX_CHANNEL_CHARS else None
                if email is not None:
                    details.append(new_detail(channel, email))
                else:
                    issues.append(_warning(line, column, Reason.INVALID_EMAIL, value))
            elif len(value) <= _MAX_CHANNEL_CHARS:  # _JOURNEY
                details.append(new_detail(channel, value))
            else:
                issues.append(_warning(line, column, Reason.VALUE_TOO_LONG, value))
        if key is None:
            if self._key_channel is not None:  # a channel key: the key column's detail
                key = keyed_by_channel(line, self._key_channel, self._key_column, details, issues)
                if key is None:
                    return None, issues
            else:
                key = Reason.MISSING_CPF_CNPJ
                issues.insert(0, RowIssue(line, self._key_column, key, None, Severity.INVALID))
        if type(key) is Reason:
            return None, issues
        row = new_contact_row(line, key, name, street_address, tuple(details), tuple(custom))
        return row, issues


def key_column(plan: RowPlan) -> str:
    """The column a missing key's issue names: the key's column (a CSV's by its name), else
    the key's own name (a JSONL object without it)."""
    channel = plan.key_channel
    if channel is None:
        if plan.field_count is None:
            return "cpf_cnpj"
        return next(c.name for c in plan.columns if c.target.attribute is Attribute.CPF_CNPJ)
    word = DedupeKey.of(channel).value
    return next((c.name for c in plan.columns if c.target.channel is channel), word)


_REPORT_VALUE_CHARS = 1024


def _warning(line: int, column: str, reason: Reason, value: str) -> RowIssue:
    return RowIssue(line, column, reason, value[:_REPORT_VALUE_CHARS], Severity.WARNING)


def record_issue(line: int, reason: Reason, raw: str) -> RowIssue:
    """The issue of a record the reader could not decode or parse."""
    return RowIssue(line, None, reason, raw[:_REPORT_VALUE_CHARS], Severity.INVALID)
