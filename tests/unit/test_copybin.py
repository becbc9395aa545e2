"""The binary COPY encoder: the pure reference against the format (decoded back here), and the
compiled twin against the reference (same bytes, same errors) on random rows."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from importer.adapters.postgres import copybin
from importer.adapters.postgres.copybin import Kind
from importer.core.models import Channel

_copybin = pytest.importorskip("importer.adapters.postgres._copybin")

TABLES = {
    "contact": copybin.CONTACT,
    "detail": copybin.DETAIL,
    "custom": copybin.CUSTOM,
    "row_error": copybin.ROW_ERROR,
}
BOUNDS = {Kind.INT2: 2**15, Kind.INT4: 2**31, Kind.INT8: 2**63}


def decode(payload: bytes, kinds: Sequence[Kind]) -> list[tuple[object, ...]]:
    """The format read back (PostgreSQL's side of COPY FROM, for these kinds)."""
    assert payload[:11] == copybin.SIGNATURE
    assert struct.unpack(">ii", payload[11:19]) == (0, 0)
    pos, rows = 19, []
    while True:
        (count,) = struct.unpack_from(">h", payload, pos)
        pos += 2
        if count == -1:
            assert pos == len(payload)
            return rows
        assert count == len(kinds)
        row: list[object] = []
        for kind in kinds:
            (size,) = struct.unpack_from(">i", payload, pos)
            pos += 4
            if size == -1:
                row.append(None)
                continue
            raw = payload[pos : pos + size]
            pos += size
            if kind is Kind.TEXT:
                row.append(raw.decode("utf-8"))
            elif kind is Kind.UUID:
                row.append(uuid.UUID(bytes=raw))
            else:
                assert size == {Kind.INT2: 2, Kind.INT4: 4, Kind.INT8: 8}[kind]
                row.append(int.from_bytes(raw, "big", signed=True))
        rows.append(tuple(row))


def outcome(
    encode: copybin.Encode, kinds: Sequence[Kind], rows: list[tuple[object, ...]]
) -> object:
    try:
        return bytes(encode(kinds, rows))
    except Exception as exc:  # the errors are compared
        return (type(exc), str(exc))


# --- strategies: values of each kind, at the bounds and past them ------------------------------

TEXT = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(min_codepoint=0x10000), max_size=20),  # astral
    st.text(alphabet="aé😀\x00", max_size=10),  # NUL: refused
    st.text(alphabet=st.characters(max_codepoint=0xFF), max_size=40),  # Latin-1: encoded in C
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1000, max_size=3000),
    st.just(""),
    st.just("\ud800"),  # a lone surrogate: not UTF-8
)


def ints(kind: Kind) -> st.SearchStrategy[object]:
    bound = BOUNDS[kind]
    edges = st.sampled_from([-bound, -bound - 1, bound - 1, bound, 0, -1, 1])
    return st.one_of(
        st.integers(-bound, bound - 1),
        edges,
        st.integers(),
        st.sampled_from(list(Channel)),
        st.sampled_from([True, 1.7, float("inf"), "12"]),  # what asyncpg takes or refuses
    )


def value(kind: Kind) -> st.SearchStrategy[object]:
    good: st.SearchStrategy[object]
    if kind is Kind.TEXT:
        good = TEXT
    elif kind is Kind.UUID:
        good = st.one_of(st.uuids(), st.uuids().map(str), st.just("not a uuid"))
    else:
        good = ints(kind)
    return st.one_of(st.none(), good, st.just(b"bytes"))


def rows_of(kinds: Sequence[Kind]) -> st.SearchStrategy[list[tuple[object, ...]]]:
    row = st.tuples(*(value(k) for k in kinds))
    short = st.just((1,))
    return st.lists(st.one_of(row, row, row, short), max_size=30)


@st.composite
def tables(draw: st.DrawFn) -> tuple[tuple[Kind, ...], list[tuple[object, ...]]]:
    kinds = draw(
        st.one_of(
            st.sampled_from(list(TABLES.values())),
            st.lists(st.sampled_from(list(Kind)), min_size=1, max_size=8).map(tuple),
        )
    )
    return kinds, draw(rows_of(kinds))


@given(tables())
def test_compiled_builds_the_references_bytes_and_errors(
    table: tuple[tuple[Kind, ...], list[tuple[object, ...]]],
) -> None:
    kinds, rows = table
    assert outcome(_copybin.encode, kinds, rows) == outcome(copybin.encode, kinds, rows)


@given(tables())
def test_the_reference_encodes_what_the_format_decodes(
    table: tuple[tuple[Kind, ...], list[tuple[object, ...]]],
) -> None:
    kinds, rows = table
    try:
        payload = copybin.encode(kinds, rows)
    except (ValueError, TypeError, OverflowError, copybin.asyncpg.PostgresError):
        return
    expected = [
        tuple(
            None
            if v is None
            else v
            if k is Kind.TEXT
            else (uuid.UUID(v) if isinstance(v, str) else v)
            if k is Kind.UUID
            else int(v)  # type: ignore[call-overload]
            for k, v in zip(kinds, row, strict=True)
        )
        for row in rows
    ]
    assert decode(bytes(payload), kinds) == expected


def test_an_empty_copy_is_the_header_and_the_trailer() -> None:
    for encode in (copybin.encode, _copybin.encode):
        assert bytes(encode(copybin.CUSTOM, [])) == b"PGCOPY\n\xff\r\n\x00" + bytes(8) + b"\xff\xff"


def test_a_detail_row_byte_by_byte() -> None:
    row = (7, 1000, Channel.EMAIL, "é", None, "BR")
    expected = (
        copybin.HEADER
        + b"\x00\x06"
        + b"\x00\x00\x00\x08" + (7).to_bytes(8, "big")
        + b"\x00\x00\x00\x04" + (1000).to_bytes(4, "big")
        + b"\x00\x00\x00\x02\x00\x03"
        + b"\x00\x00\x00\x02\xc3\xa9"
        + b"\xff\xff\xff\xff"
        + b"\x00\x00\x00\x02BR"
        + b"\xff\xff"
    )  # fmt: skip
    for encode in (copybin.encode, _copybin.encode):
        assert bytes(encode(copybin.DETAIL, [row])) == expected


@pytest.mark.parametrize(
    ("row", "error", "message"),
    [
        ((1, 2, "a\x00b", "n", None, None), copybin.asyncpg.DataError, "0x00"),
        ((1, 2, "\udcff", "n", None, None), UnicodeEncodeError, "surrogates not allowed"),
        ((1, 2**31, "k", "n", None, None), OverflowError, "value out of int32 range"),
        ((2**63, 2, "k", "n", None, None), OverflowError, "value out of int64 range"),
        ((1, 2, 3, "n", None, None), TypeError, "expected str, got int"),
        ((1, 2, "k", "n", None, 5), TypeError, "expected a UUID, got int"),
        ((1, 2, "k"), ValueError, "a row of 3 values for 6 columns"),
    ],
)
def test_refusals_are_asyncpgs_errors(row: tuple[object, ...], error: type, message: str) -> None:
    for encode in (copybin.encode, _copybin.encode):
        with pytest.raises(error, match=message):
            encode(copybin.CONTACT, [row])


def test_the_encoder_falls_back_to_the_reference() -> None:
    assert copybin.encoder(False) is copybin.encode
    assert copybin.encoder(True) is _copybin.encode
