"""PostgreSQL's binary COPY format, encoded here instead of by the driver (the reference).

``COPY ... FROM STDIN (FORMAT binary)`` reads a header (the signature ``PGCOPY\\n\\377\\r\\n\\0``,
an int32 of flags and an int32 header extension length, both 0), then per tuple an int16 field
count and per field an int32 length (-1: NULL) and the value's bytes, then an int16 -1 trailer.
All integers are big-endian.

Only the column types the COPYed tables use are encoded (:class:`Kind`); each table's columns
are listed here (:data:`CONTACT`, :data:`DETAIL`, :data:`CUSTOM`, :data:`ROW_ERROR`) in the
order of its COPY column list. The values and the errors are asyncpg's
(``copy_records_to_table``): an int out of its column's range is an ``OverflowError``, text must
be a ``str`` and is sent as UTF-8 (a lone surrogate is a ``UnicodeEncodeError``); NUL, which
PostgreSQL refuses in text, is refused here with the error the server would raise
(:func:`nul_refused`, a ``DataError``: the batch splits down to the row, as before).

A batch's plan becomes its three tables' rows by :func:`plan_rows` and their payloads by
:func:`encode_plan`.

This module is the specification; ``_copybin.pyx`` builds the same bytes in C (:func:`encoder`
and :func:`plan_encoder` choose), the plan's straight from its folds, without the tuples.
"""

from __future__ import annotations

import enum
import operator
import struct
import uuid
from collections.abc import Callable, Sequence
from typing import SupportsIndex, SupportsInt, cast

import asyncpg

from importer.core.merge import BatchPlan, merged


class Kind(enum.IntEnum):
    """A column's type, as the binary format sends it."""

    INT2 = 1  # smallint: int32 length 2, int16
    INT4 = 2  # integer: 4, int32
    INT8 = 3  # bigint: 8, int64
    TEXT = 4  # text: the UTF-8 bytes
    UUID = 5  # uuid: 16 bytes


# The tables' COPY columns (importer/sql/schema.sql), in the order batches.py lists them.
CONTACT = (Kind.INT8, Kind.INT4, Kind.TEXT, Kind.TEXT, Kind.TEXT, Kind.UUID)
DETAIL = (Kind.INT8, Kind.INT4, Kind.INT2, Kind.TEXT, Kind.INT4, Kind.TEXT)
CUSTOM = (Kind.INT8, Kind.INT4, Kind.INT4, Kind.TEXT)
ROW_ERROR = (Kind.UUID, Kind.INT4, Kind.TEXT, Kind.TEXT, Kind.TEXT, Kind.TEXT)

SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
HEADER = SIGNATURE + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"  # flags, extension length
TRAILER = b"\xff\xff"  # int16 -1
NULL = b"\xff\xff\xff\xff"  # int32 -1
MAX_FIELD = 0x7FFFFFFF  # a field's length is an int32
MAX_COLUMNS = 1664  # PostgreSQL's limit on a tuple's columns (the count is an int16)

_COUNT = struct.Struct(">h")
_LENGTH = struct.Struct(">i")

# Rows and their columns → the COPY payload (this module's encode, or _copybin's).
Encode = Callable[[Sequence[Kind], Sequence[Sequence[object]]], bytearray]
Rows = list[tuple[object, ...]]
# (plan, new contacts' ids, client, job id, custom field ids by lower-case name) → the payloads
# of contact, contact_details and contact_custom_fields.
EncodePlan = Callable[
    [BatchPlan, Sequence[int], int, uuid.UUID, dict[str, int]],
    tuple[bytearray, bytearray, bytearray],
]
EMPTY = len(HEADER) + len(TRAILER)  # the length of a payload of no row


def nul_refused() -> asyncpg.exceptions.CharacterNotInRepertoireError:
    """The server's refusal of a NUL in text (SQLSTATE 22021), raised before COPY sends it."""
    return asyncpg.exceptions.CharacterNotInRepertoireError(
        'invalid byte sequence for encoding "UTF8": 0x00'
    )


def encode(kinds: Sequence[Kind], rows: Sequence[Sequence[object]]) -> bytearray:
    """The binary COPY payload of ``rows`` (each a value per column of ``kinds``, None: NULL)."""
    fields = [_FIELDS[kind] for kind in _columns(kinds)]
    width = len(fields)
    count = _COUNT.pack(width)
    out = bytearray(HEADER)
    for row in rows:
        values = row if type(row) is tuple else tuple(row)
        if len(values) != width:
            raise ValueError(f"a row of {len(values)} values for {width} columns")
        out += count
        for field, value in zip(fields, values, strict=True):
            out += NULL if value is None else field(value)
    out += TRAILER
    return out


def plan_rows(
    plan: BatchPlan, ids: Sequence[int], client: int, job_id: uuid.UUID, field_ids: dict[str, int]
) -> tuple[Rows, Rows, Rows]:
    """The rows a plan inserts into contact, contact_details and contact_custom_fields, in COPY
    column order: first the stored contacts' new channels and custom values, then each new
    contact (``ids[i]`` for ``plan.new_contacts[i]``) with its own."""
    if len(ids) != len(plan.new_contacts):
        raise ValueError(f"{len(ids)} ids for {len(plan.new_contacts)} new contacts")
    contacts: Rows = []
    details: Rows = [
        (cid, client, d.channel, d.value, d.country_code, d.country)
        for cid, d in plan.detail_inserts
    ]
    customs: Rows = [
        (cid, client, field_ids[name.lower()], value) for cid, name, value in plan.custom_inserts
    ]
    cpf_keys = plan.cpf_keys
    for contact_id, entry in zip(ids, plan.new_contacts, strict=True):
        contact = merged(entry)
        cpf = contact.key if cpf_keys else None
        contacts.append((contact_id, client, cpf, contact.name, contact.street_address, job_id))
        details += [
            (contact_id, client, d.channel, d.value, d.country_code, d.country)
            for d in contact.details.values()
        ]
        customs += [
            (contact_id, client, field_ids[lower], value)
            for lower, (_, value) in contact.custom_fields.items()
        ]
    return contacts, details, customs


def encode_plan(
    plan: BatchPlan, ids: Sequence[int], client: int, job_id: uuid.UUID, field_ids: dict[str, int]
) -> tuple[bytearray, bytearray, bytearray]:
    """The payloads of :func:`plan_rows` (the reference of the compiled ``encode_plan``)."""
    contacts, details, customs = plan_rows(plan, ids, client, job_id, field_ids)
    return encode(CONTACT, contacts), encode(DETAIL, details), encode(CUSTOM, customs)


def plan_encoder() -> EncodePlan | None:
    """The compiled plan encoder, or None when the extension is not built."""
    try:
        from importer.adapters.postgres import _copybin
    except ImportError:
        return None
    return _copybin.encode_plan


def compiled_encoder() -> Encode | None:
    """The compiled encoder, or None when the extension is not built."""
    try:
        from importer.adapters.postgres import _copybin
    except ImportError:
        return None
    return _copybin.encode


def encoder(compiled: bool) -> Encode:
    """The compiled encoder when asked for and built, else this module's :func:`encode`."""
    return (compiled_encoder() if compiled else None) or encode


def _columns(kinds: Sequence[Kind]) -> tuple[Kind, ...]:
    columns = tuple(Kind(k) for k in kinds)
    if not 0 < len(columns) <= MAX_COLUMNS:
        raise ValueError(f"a COPY of {len(columns)} columns")
    return columns


def _int_field(size: int, name: str) -> Callable[[object], bytes]:
    """The field of an int column of ``size`` bytes (``name``: its range in asyncpg's error)."""
    length = _LENGTH.pack(size)
    lowest, highest = -(2 ** (8 * size - 1)), 2 ** (8 * size - 1) - 1

    def field(value: object) -> bytes:
        if type(value) is int and lowest <= value <= highest:  # the common case, quickly
            return length + value.to_bytes(size, "big", signed=True)
        try:
            number: int | None = integer(value)
        except OverflowError:  # int(inf), as asyncpg: out of range
            number = None
        if number is None or not lowest <= number <= highest:
            raise OverflowError(f"value out of {name} range")
        return length + number.to_bytes(size, "big", signed=True)

    return field


def _text_field(value: object) -> bytes:
    raw = value.encode("utf-8") if type(value) is str else text_bytes(value)
    if b"\x00" in raw or len(raw) > MAX_FIELD:
        raw = text_bytes(value)  # raises
    return _LENGTH.pack(len(raw)) + raw


def _uuid_field(value: object) -> bytes:
    return b"\x00\x00\x00\x10" + uuid_bytes(value)


# A column kind → its (non-NULL) field: the int32 length and the value's bytes.
_FIELDS = {
    Kind.INT2: _int_field(2, "int16"),
    Kind.INT4: _int_field(4, "int32"),
    Kind.INT8: _int_field(8, "int64"),
    Kind.TEXT: _text_field,
    Kind.UUID: _uuid_field,
}


def integer(value: object) -> int:
    """An int column's value as asyncpg takes it: an int, or what ``int()`` makes of an object
    with ``__int__`` (a float is truncated), else a TypeError."""
    if type(value) is int:
        return value
    if isinstance(value, int):
        return int(value)
    if hasattr(type(value), "__int__"):
        return int(cast(SupportsInt, value))
    return operator.index(cast(SupportsIndex, value))  # raises the TypeError


def text_bytes(value: object) -> bytes:
    """A text column's bytes: the str in UTF-8 (no NUL, at most :data:`MAX_FIELD` bytes)."""
    if not isinstance(value, str):
        raise TypeError(f"expected str, got {type(value).__name__}")
    raw = value.encode("utf-8")
    if len(raw) > MAX_FIELD:
        raise ValueError("string too long")
    if b"\x00" in raw:
        raise nul_refused()
    return raw


def uuid_bytes(value: object) -> bytes:
    """A uuid column's 16 bytes: a UUID's (anything with 16 ``bytes``), or a str parsed."""
    if isinstance(value, str):
        return uuid.UUID(value).bytes
    raw = getattr(value, "bytes", None)
    if not isinstance(raw, bytes) or len(raw) != 16:
        raise TypeError(f"expected a UUID, got {type(value).__name__}")
    return raw
