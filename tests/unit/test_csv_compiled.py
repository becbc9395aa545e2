"""importer.read._csvfast: the compiled CSV reader gives exactly what the pure CsvReader gives.

The pure reader is the specification: on random hostile texts (quotes, quoted line breaks, ""
escapes, CR / LF / CRLF, NUL, ragged rows, overlong fields and records, blank lines, a BOM,
undecodable bytes) in UTF-8, Windows-1252 and UTF-16, fed in random blocks with random caps, both
return the same records feed by feed, raise the same errors and end in the same state.
"""

from __future__ import annotations

import itertools
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from importer.core.config import PipelineConfig
from importer.core.models import InputFormat, Limits
from importer.read.blocks import _reader
from importer.read.csvfile import CsvReader
from importer.read.records import RawRecord, Sniffed

csvfast = pytest.importorskip("importer.read._csvfast", reason="the extension is not built")
FastCsvReader = csvfast.FastCsvReader

PIECES = [
    *("a", "b", "x y", ",", ";", "\t", '"', '""', '"a"', "\n", "\r", "\r\n", " ", "  \n"),
    *("\u00e9", "\u00e7\u00e3", "\u20ac", "\U0001f600", "\u0100", "\x00", "\x85", "\u2028"),
    *("x" * 30, '"' + "y" * 25, "z," * 12),
]
BAD_BYTES = [b"\xff", b"\x81", b"\xc3", b"\xe2\x82", b"\x00\xd8", b"\x00", b"\xef\xbb\xbf"]
ENCODINGS = ["utf-8", "cp1252", "utf-16-le", "utf-16-be"]
BOMS = {"utf-8": b"\xef\xbb\xbf", "utf-16-le": b"\xff\xfe", "utf-16-be": b"\xfe\xff", "cp1252": b""}


def run(cls: type[CsvReader], blocks: list[bytes], sniffed: Sniffed, **options: int) -> Any:
    """Everything observable of one read: the records per feed, the error, the final state."""
    steps: list[Any] = []
    try:
        reader = cls(sniffed, **options)
        for block in blocks:
            steps.append(reader.feed(block))
            steps.append(state(reader))
        steps.append(reader.finish())
    except Exception as error:  # the same error is the expected answer
        return steps, (type(error), str(error)), None
    return steps, None, state(reader)


def state(reader: CsvReader) -> tuple[Any, ...]:
    return (
        *(reader.buffered_chars, reader.mojibake, reader.encoding, reader._line),
        *(reader._offset, reader._buf, reader._dirty, reader._skip, reader._prefix),
    )


def check_same(blocks: list[bytes], sniffed: Sniffed, **options: int) -> list[RawRecord]:
    pure = run(CsvReader, blocks, sniffed, **options)
    fast = run(FastCsvReader, blocks, sniffed, **options)
    assert fast == pure
    records = [record for step in fast[0] if isinstance(step, list) for record in step]
    for record in records:
        assert all(map(canonical, [record.raw, *(record.fields or [])]))
    return records


def canonical(text: str) -> bool:
    """Whether text is stored in the narrowest kind (as CPython makes every str), which the
    compiled reader chooses itself: the same size and ASCII flag as a copy made by CPython."""
    copy = (text + "x")[:-1]
    return sys.getsizeof(copy) == sys.getsizeof(text) and copy.isascii() == text.isascii()


def cut(data: bytes, block: int) -> list[bytes]:
    return [data[start : start + block] for start in range(0, len(data), block)]


@st.composite
def hostile_files(draw: st.DrawFn) -> tuple[bytes, Sniffed]:
    encoding = draw(st.sampled_from(ENCODINGS))
    delimiter = draw(
        st.sampled_from([",", ";", "\t", "|", "x", " ", "\u00e9", "\x00", "\U0001f600"])
    )
    pieces = draw(st.lists(st.sampled_from(PIECES), max_size=60))
    data = bytearray()
    for piece in pieces:
        data += piece.encode(encoding, "replace")
        if draw(st.integers(0, 15)) == 0:
            data += draw(st.sampled_from(BAD_BYTES))
    bom = BOMS[encoding] if draw(st.booleans()) else b""
    return bom + bytes(data), Sniffed(encoding, delimiter, len(bom))


CAPS = st.one_of(
    st.tuples(st.integers(1, 40), st.integers(1, 80)),
    st.just((65536, 1048576)),
)
BLOCKS = st.one_of(st.sampled_from([1, 3, 500, 10**6]), st.integers(1, 64))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_files(), CAPS, BLOCKS, st.integers(1, 5), st.sampled_from([0, 0, 17]))
@example((b'a,"b\r\n""c"\r\r\n', Sniffed("utf-8", ",", 0)), (3, 5), 1, 1, 0)
def test_compiled_reader_is_the_pure_reader(
    file: tuple[bytes, Sniffed], caps: tuple[int, int], block: int, line: int, offset: int
) -> None:
    data, sniffed = file
    max_field, max_record = caps
    check_same(
        cut(data, block),
        sniffed,
        max_field_chars=max_field,
        max_record_chars=max_record,
        start_line=line,
        start_offset=offset,
    )


@settings(max_examples=300, deadline=None)
@given(hostile_files(), st.lists(st.integers(0, 400), max_size=8), CAPS)
def test_compiled_reader_is_the_pure_reader_whatever_the_cuts(
    file: tuple[bytes, Sniffed], cuts: list[int], caps: tuple[int, int]
) -> None:
    data, sniffed = file
    points = [0, *sorted({c for c in cuts if c <= len(data)}), len(data)]
    blocks = [data[a:b] for a, b in itertools.pairwise(points)]
    check_same(blocks, sniffed, max_field_chars=caps[0], max_record_chars=caps[1])


@pytest.mark.parametrize("records", [1, 4095, 4096, 4097, 10_000])
def test_many_records_and_fields_cross_the_scan_arrays(records: int) -> None:
    # the compiled scan holds 4096 records and 16384 fields at a time
    data = "".join(f'{i},{"x" * (i % 7)},"q{i}"\r\n' for i in range(records)).encode()
    for block in (4096, 10**7):
        got = check_same(cut(data, block), Sniffed("utf-8", ",", 0))
        assert len(got) == records


@pytest.mark.parametrize("block", [999, 65536, 10**7])
def test_a_record_wider_than_the_scan_is_left_to_the_pure_reader(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    pure_rest = FastCsvReader._pure_rest

    def counted(self: Any, *args: Any) -> None:
        calls.append(1)
        pure_rest(self, *args)

    monkeypatch.setattr(FastCsvReader, "_pure_rest", counted)
    wide = ",".join(["f"] * 20_000)
    data = f'a,b\n{wide}\n"c",d\n{wide},"x\n{wide}"\r\nlast,1\n{wide}'.encode()
    got = check_same(cut(data, block), Sniffed("utf-8", ",", 0))
    assert [len(record.fields or []) for record in got] == [2, 20_000, 2, 20_001, 2, 20_000]
    assert calls


def test_records_are_real_raw_records() -> None:
    record = FastCsvReader(Sniffed("utf-8", ",", 0)).feed(b"a,b\n")[0]
    assert type(record) is RawRecord
    assert record == RawRecord(1, ["a", "b"], None, "a,b", 4, 2)
    assert hash(record.raw) == hash("a,b")
    with pytest.raises(AttributeError):
        record.line = 3  # type: ignore[misc]
    assert csvfast.DIRECT_RECORDS


def test_errors_are_the_pure_errors() -> None:
    for delimiter in ("", ";;", '"', "\n"):
        with pytest.raises(ValueError, match="a delimiter is one character"):
            FastCsvReader(Sniffed("utf-8", delimiter, 0))
    assert (
        run(FastCsvReader, [b"a"], Sniffed("ebcdic", ",", 0))[1:]
        == run(CsvReader, [b"a"], Sniffed("ebcdic", ",", 0))[1:]
    )


@pytest.mark.parametrize("compiled", [True, False])
def test_the_block_parser_picks_the_reader_by_the_config(compiled: bool) -> None:
    reader = _reader(b"a,b\n", InputFormat.CSV, PipelineConfig(Limits(), compiled=compiled))
    assert type(reader) is (FastCsvReader if compiled else CsvReader)
