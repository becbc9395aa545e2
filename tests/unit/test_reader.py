"""importer.read: sniffing, CSV and JSONL records from byte blocks, gzip with a cap."""

from __future__ import annotations

import collections
import csv
import gzip
import io
import itertools
import json
import os
import time
import tracemalloc
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from importer.core.errors import FileRejectedError
from importer.core.models import Reason
from importer.read.csvfile import CsvReader
from importer.read.inflate import GzipInflater
from importer.read.jsonl import JsonlReader
from importer.read.records import RAW_CHARS, FileRejected, JsonRecord, RawRecord, Sniffed
from importer.read.sniff import sniff
from tests.unit.csv_readers import csv_reader_tests

pytest_generate_tests, csv_reader = csv_reader_tests(globals(), "read_csv")

FIXTURES = Path(__file__).parent.parent / "fixtures" / "csv"
CASES = sorted((FIXTURES / "spectrum").glob("*.json")) + sorted((FIXTURES / "cases").glob("*.json"))
UTF8 = Sniffed("utf-8", ",", 0)
KIB = 1024
MIB = 1024 * KIB


def blocks_of(data: bytes, size: int) -> Iterator[bytes]:
    return (data[start : start + size] for start in range(0, len(data), size))


def cut_at(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    points = [0, *sorted(set(cuts)), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points)]


def read_csv(blocks: Iterable[bytes], sniffed: Sniffed = UTF8, **limits: int) -> list[RawRecord]:
    reader = CsvReader(sniffed, **limits)
    records: list[RawRecord] = []
    for block in blocks:
        records += reader.feed(block)
    return records + reader.finish()


def read_jsonl(blocks: Iterable[bytes], sniffed: Sniffed = UTF8, **limits: int) -> list[JsonRecord]:
    reader = JsonlReader(sniffed, **limits)
    records: list[JsonRecord] = []
    for block in blocks:
        records += reader.feed(block)
    return records + reader.finish()


def outline(records: Iterable[RawRecord]) -> list[tuple[int, Any]]:
    return [(r.line, r.fields if r.reason is None else r.reason) for r in records]


def load_case(spec_path: Path) -> tuple[bytes, dict[str, Any]]:
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    data_path = next(p for p in spec_path.parent.glob(spec_path.stem + ".*") if p.suffix != ".json")
    return data_path.read_bytes(), spec


# --- the fixture corpus (csv-spectrum rewritten, plus encodings and dialects) ----------------


@pytest.mark.parametrize("spec_path", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fixture_case(spec_path: Path) -> None:
    data, spec = load_case(spec_path)
    sniffed = sniff(data[: 64 * KIB], encoding=spec.get("given"))
    assert sniffed == Sniffed(**spec["sniff"])
    for size in (1, 3, 7, 64 * KIB):
        records = read_csv(blocks_of(data, size), sniffed)
        expected = [(r["line"], r.get("fields") or Reason(r["reason"])) for r in spec["records"]]
        assert outline(records) == expected, f"block size {size}"
        for record, want in zip(records, spec["records"], strict=True):
            if "raw" in want:
                assert record.raw == want["raw"]
        offsets = [record.end_offset for record in records]
        assert offsets == sorted(set(offsets))
        rest = Sniffed(sniffed.encoding, sniffed.delimiter, 0)
        assert read_csv([data[offsets[-1] :]], rest) == []  # only blank lines after the last


def test_no_record_text_holds_a_replacement_character() -> None:
    for spec_path in CASES:
        data, spec = load_case(spec_path)
        sniffed = sniff(data, encoding=spec.get("given"))
        for record in read_csv([data], sniffed):
            assert "\ufffd" not in record.raw
            assert all("\ufffd" not in field for field in record.fields or [])


# --- CSV semantics --------------------------------------------------------------------------


def test_header_is_returned_like_any_record() -> None:
    assert outline(read_csv([b"nome,cpf\n"])) == [(1, ["nome", "cpf"])]


def test_fields_are_not_trimmed() -> None:
    assert outline(read_csv([b" a , b\t,\n"])) == [(1, [" a ", " b\t", ""])]


def test_quoted_line_breaks_count_towards_the_next_record_line() -> None:
    data = b'h\n"1\n2\r\n3\r4"\nnext\n'
    assert outline(read_csv([data])) == [(1, ["h"]), (2, ["1\n2\r\n3\r4"]), (6, ["next"])]


def test_crlf_split_between_blocks_is_one_line_break() -> None:
    data = b"a\r\nb\r\nc\r\n"
    for cut in range(len(data) + 1):
        assert outline(read_csv(cut_at(data, [cut]))) == [(1, ["a"]), (2, ["b"]), (3, ["c"])]


def test_cr_only_line_ends() -> None:
    assert outline(read_csv([b"a,b\r1,2\r\r3,4"])) == [
        (1, ["a", "b"]),
        (2, ["1", "2"]),
        (4, ["3", "4"]),
    ]


def test_end_offsets_count_bytes_including_the_bom() -> None:
    data = "\ufeffnome\r\nJoão\r\n€\n".encode()
    sniffed = sniff(data)
    offsets = [r.end_offset for r in read_csv([data], sniffed)]
    assert offsets == [3 + 6, 3 + 6 + 7, len(data)]


def test_utf16_end_offsets_and_astral_characters() -> None:
    text = "a\tb\r\n😀\tç\r\n"
    data = b"\xff\xfe" + text.encode("utf-16-le")
    records = read_csv(blocks_of(data, 3), sniff(data))
    assert outline(records) == [(1, ["a", "b"]), (2, ["😀", "ç"])]
    assert [r.end_offset for r in records] == [2 + 10, len(data)]


def test_raw_is_cut_and_shows_bad_bytes_escaped() -> None:
    long_value = "x" * 500
    records = read_csv([f"{long_value},y\n".encode(), b"\xff" * 300 + b"\n"])
    assert records[0].raw == long_value[:RAW_CHARS]
    assert records[1].reason is Reason.INVALID_ENCODING
    assert records[1].raw == "\\xff" * (RAW_CHARS // 4)


def test_one_bad_record_leaves_the_next_ones_intact() -> None:
    data = b"a,b\n1,\xc3\n2,\xc3\xa7\n3,\x00\n4,ok"
    assert outline(read_csv([data])) == [
        (1, ["a", "b"]),
        (2, Reason.INVALID_ENCODING),
        (3, ["2", "ç"]),
        (4, Reason.NUL_BYTE),
        (5, ["4", "ok"]),
    ]


def test_invalid_utf8_cut_at_end_of_file_is_invalid_not_lost() -> None:
    assert outline(read_csv([b"a\nb\xc3"])) == [(1, ["a"]), (2, Reason.INVALID_ENCODING)]


def test_utf16_unpaired_surrogate_spoils_its_record_only() -> None:
    body = "a\r\n".encode("utf-16-le") + b"\x00\xd8" + "b\r\nc\r\n".encode("utf-16-le")
    data = b"\xff\xfe" + body
    records = read_csv(blocks_of(data, 5), Sniffed("utf-16-le", ",", 2))
    assert outline(records) == [(1, ["a"]), (2, Reason.INVALID_ENCODING), (3, ["c"])]
    assert records[1].raw == "\\x00\\xd8b"


def test_utf16_odd_byte_at_end_is_invalid() -> None:
    data = b"\xff\xfe" + "a\nb".encode("utf-16-le") + b"\x41"
    records = read_csv([data], Sniffed("utf-16-le", ",", 2))
    assert outline(records) == [(1, ["a"]), (2, Reason.INVALID_ENCODING)]


def test_field_over_the_cap_is_field_too_long() -> None:
    data = b"a,b\n1," + b"x" * 101 + b"\n2,ok\n"
    records = read_csv([data], max_field_chars=100)
    assert outline(records) == [(1, ["a", "b"]), (2, Reason.FIELD_TOO_LONG), (3, ["2", "ok"])]


def test_record_over_the_cap_within_one_block_is_field_too_long() -> None:
    data = b"a\n" + b"x," * 60 + b"\n" + b"b\n"
    records = read_csv([data], max_field_chars=10, max_record_chars=100)
    assert outline(records) == [(1, ["a"]), (2, Reason.FIELD_TOO_LONG), (3, ["b"])]


def test_record_of_exactly_the_cap_is_kept() -> None:
    for blocks in ([b"x" * 100 + b"\r\n"], list(blocks_of(b"x" * 100 + b"\r\n", 1))):
        assert outline(read_csv(blocks, max_record_chars=100)) == [(1, ["x" * 100])]


def test_a_record_over_the_cap_is_too_long_whatever_it_holds() -> None:
    # The same answer whether the record arrives whole or is skipped block by block.
    data = b"a\n" + b" " * 50 + b"\n" + b"\x00" * 50 + b"\nb\n"
    for size in (1, 1000):
        got = read_csv(blocks_of(data, size), max_record_chars=20)
        assert outline(got) == [
            (1, ["a"]),
            (2, Reason.FIELD_TOO_LONG),
            (3, Reason.FIELD_TOO_LONG),
            (4, ["b"]),
        ]


def test_field_beyond_pythons_csv_default_limit_is_read() -> None:
    value = "q" * 200_000  # csv's own default limit is 131,072
    data = f'a\n"{value}"\n'.encode()
    records = read_csv(blocks_of(data, 64 * KIB), max_field_chars=300_000)
    assert outline(records) == [(1, ["a"]), (2, [value])]


@pytest.mark.parametrize("block", [64 * KIB, 10**9])
def test_long_quoted_field_hiding_a_record_is_one_field_too_long(block: int) -> None:
    filler = b"y" * (MIB // 2)
    data = b'id,note\n1,"' + filler + b"\n2,fake,record\n" + filler + b'",x\n3,after\n'
    records = read_csv(blocks_of(data, block))
    assert outline(records) == [
        (1, ["id", "note"]),
        (2, Reason.FIELD_TOO_LONG),
        (5, ["3", "after"]),
    ]
    assert records[1].raw == ('1,"' + "y" * RAW_CHARS)[:RAW_CHARS]
    assert records[1].end_offset == len(data) - len(b"3,after\n")


def test_field_over_field_cap_hiding_a_record_is_not_split() -> None:
    # Python's csv would raise at its limit and resume inside the field, emitting the fake.
    filler = b"z" * 140_000
    data = b'id,note\n1,"' + filler + b'\n2,fake\n",x\n3,after\n'
    records = read_csv(blocks_of(data, 64 * KIB))
    assert outline(records) == [
        (1, ["id", "note"]),
        (2, Reason.FIELD_TOO_LONG),
        (5, ["3", "after"]),
    ]


def test_long_record_in_every_csv_state_resyncs_at_its_real_end() -> None:
    cap = 1000
    starts = [b"x" * 2000, b'"' + b"x" * 2000, b'"x""' + b"x" * 2000, b'"x"' + b"x" * 2000]
    for start in starts:
        for tail in (b'\n2,"b\n3"\n4\n', b'",\n2\n', b'"\n5\n'):
            data = b"h\n" + start + tail + b"last\n"
            whole = outline(read_csv([data], max_record_chars=cap, max_field_chars=cap))
            for block in (1, 7, 64, 333):
                blocks = blocks_of(data, block)
                got = read_csv(blocks, max_record_chars=cap, max_field_chars=cap)
                assert outline(got) == whole, (start[:5], tail, block)
            assert whole[1][1] is Reason.FIELD_TOO_LONG
            assert whole[-1][1] == ["last"]
            reference = list(csv.reader(io.StringIO(data.decode(), newline="")))
            assert len(whole) == len(reference)


def test_5_mib_line_without_newline_keeps_memory_bounded() -> None:
    cap = 1 * MIB
    reader = CsvReader(UTF8, max_record_chars=cap)
    records = reader.feed(b"header\n")
    most = 0
    tracemalloc.start()
    for _ in range(5 * MIB // (64 * KIB)):
        records += reader.feed(b"x" * (64 * KIB))
        most = max(most, reader.buffered_chars)
    records += reader.finish()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert most <= 2 * cap
    assert peak < 6 * MIB
    assert outline(records) == [(1, ["header"]), (2, Reason.FIELD_TOO_LONG)]
    assert records[-1].end_offset == 7 + 5 * MIB


def test_unterminated_quote_of_5_mib_keeps_memory_bounded() -> None:
    cap = 1 * MIB
    reader = CsvReader(UTF8, max_record_chars=cap)
    records = reader.feed(b'a\n"open\n')
    most = 0
    for _ in range(5 * MIB // (64 * KIB)):
        records += reader.feed(b"x,\r\n" * (16 * KIB))
        most = max(most, reader.buffered_chars)
    records += reader.finish()
    assert most <= 2 * cap
    assert outline(records) == [(1, ["a"]), (2, Reason.FIELD_TOO_LONG)]


def test_unterminated_quote_under_the_cap_runs_to_end_of_file() -> None:
    assert outline(read_csv([b'a\n1,"x\n2,y'])) == [(1, ["a"]), (2, ["1", "x\n2,y"])]


def test_resume_from_any_record_end_gives_the_same_records() -> None:
    data = b"\xef\xbb\xbf" + TRICKY.encode()
    sniffed = sniff(data)
    records = read_csv([data], sniffed)
    for index, record in enumerate(records[:-1]):
        done = data[: record.end_offset].decode(errors="surrogateescape")
        line = done.count("\n") + done.count("\r") - done.count("\r\n") + 1
        reader = CsvReader(sniffed, start_line=line, start_offset=record.end_offset)
        rest = reader.feed(data[record.end_offset :]) + reader.finish()
        assert rest == records[index + 1 :]


TRICKY = (
    'nome,cidade,obs\r\n"Jo\u00e3o ""J""",S\u00e3o Paulo,"linha 1\r\nlinha 2"\r\n\r\n,,\r\n'
    'Ana,Macei\u00f3,\U0001f600\rBia,x"y,z\n"a,b","",\n  \n"""",,\nfim,sem,quebra'
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(TRICKY.encode())), max_size=12))
def test_any_split_into_blocks_gives_the_same_records(cuts: list[int]) -> None:
    data = TRICKY.encode()
    assert read_csv(cut_at(data, cuts)) == read_csv([data])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2 + 2 * len(TRICKY)), max_size=12))
def test_any_split_of_utf16_gives_the_same_records(cuts: list[int]) -> None:
    data = b"\xff\xfe" + TRICKY.encode("utf-16-le")
    sniffed = Sniffed("utf-16-le", ",", 2)
    expected = read_csv([TRICKY.encode()])
    got = read_csv(cut_at(data, cuts), sniffed)
    assert outline(got) == outline(expected)
    assert got[-1].end_offset == len(data)


CSV_ALPHABET = st.sampled_from(
    [
        *("a", "b", ",", ";", '"', '"', "\n", "\r", "\r\n", " ", "\u00e9", "\U0001f600", "\x00"),
        *("\x0b", "\x85", "\u2028", "xxxxx"),  # line breaks to str.splitlines, not to csv
    ]
)
CAPS = st.sampled_from([(4, 8), (3, 20), (50, 10), (65536, 1048576)])


def csv_reference(text: str, delimiter: str, max_field: int, max_record: int) -> list[Any]:
    """What the reader must return, worked out with Python's csv reading the whole text."""
    lines = io.StringIO(text, newline="").readlines()
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    expected: list[Any] = []
    line = 1
    for row in reader:
        record = "".join(lines[line - 1 : reader.line_num])
        open_at_end = reader.line_num == len(lines) and _ends_in_quotes(text, delimiter)
        content = record if open_at_end else _without_line_break(record)
        if len(content) > max_record:
            expected.append((line, Reason.FIELD_TOO_LONG))
        elif "\x00" in record:
            expected.append((line, Reason.NUL_BYTE))
        elif max(map(len, row), default=0) > max_field:
            expected.append((line, Reason.FIELD_TOO_LONG))
        elif "".join(row).strip():
            expected.append((line, row))
        line = reader.line_num + 1
    return expected


def _ends_in_quotes(text: str, delimiter: str) -> bool:
    state = "start"
    for char in text:
        ends_field = char == delimiter or char in "\r\n"
        if state == "quoted":
            state = "quote" if char == '"' else "quoted"
        elif state == "field":
            state = "start" if ends_field else "field"
        elif state == "start":
            state = "quoted" if char == '"' else "start" if ends_field else "field"
        else:  # just after a quote inside quotes
            state = "quoted" if char == '"' else "start" if ends_field else "field"
    return state == "quoted"


def _without_line_break(record: str) -> str:
    for line_break in ("\r\n", "\n", "\r"):
        if record.endswith(line_break):
            return record[: -len(line_break)]
    return record


@settings(max_examples=400, deadline=None)
@given(
    st.lists(CSV_ALPHABET, max_size=40).map("".join),
    st.sampled_from([",", ";"]),
    CAPS,
    st.lists(st.integers(0, 200), max_size=6),
)
def test_records_lines_and_reasons_match_pythons_csv(
    text: str, delimiter: str, caps: tuple[int, int], cuts: list[int]
) -> None:
    max_field, max_record = caps
    expected = csv_reference(text, delimiter, max_field, max_record)
    limits = {"max_field_chars": max_field, "max_record_chars": max_record}
    data = text.encode()
    sniffed = Sniffed("utf-8", delimiter, 0)
    got = read_csv(cut_at(data, [c for c in cuts if c <= len(data)]), sniffed, **limits)
    assert outline(got) == expected
    utf16 = b"\xfe\xff" + text.encode("utf-16-be")
    sniffed16 = Sniffed("utf-16-be", delimiter, 2)
    got16 = read_csv(cut_at(utf16, [c for c in cuts if c <= len(utf16)]), sniffed16, **limits)
    assert outline(got16) == expected
    assert [r.end_offset for r in got16] == [
        2 + len(data[: r.end_offset].decode().encode("utf-16-be")) for r in got
    ]


@settings(max_examples=200, deadline=None)
@given(st.lists(CSV_ALPHABET, min_size=1, max_size=60).map("".join), st.integers(1, 9))
def test_small_caps_never_change_how_records_are_cut(text: str, block: int) -> None:
    data = f"{text}\nend\n".encode()
    whole = read_csv([data], max_field_chars=4, max_record_chars=6)
    assert read_csv(blocks_of(data, block), max_field_chars=4, max_record_chars=6) == whole
    valid = [r for r in whole if r.reason is None]
    assert all(len(field) <= 4 for r in valid for field in r.fields or [])


# --- sniffing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "encoding", "bom_length"),
    [
        (b"\xef\xbb\xbfa,b\n", "utf-8", 3),
        (b"\xff\xfe" + "a\tb\r\n".encode("utf-16-le"), "utf-16-le", 2),
        (b"\xfe\xff" + "a\tb\r\n".encode("utf-16-be"), "utf-16-be", 2),
        (b"\xff\xfe\x00\x00" + "a,b\n".encode("utf-32-le"), "utf-32-le", 4),
        (b"a,b\n", "utf-8", 0),
        ("nome,cidade\nJoão,São Paulo\n".encode(), "utf-8", 0),
        ("nome;cidade\nJoão;São Paulo\n".encode("cp1252"), "cp1252", 0),
        ("nome;cidade\nMaria Conceição;“Goiânia”\n".encode("cp1252"), "cp1252", 0),
        ("a,b\n1,café\n".encode("latin-1"), "cp1252", 0),
    ],
)
def test_sniff_detects_the_encoding(data: bytes, encoding: str, bom_length: int) -> None:
    sniffed = sniff(data)
    assert (sniffed.encoding, sniffed.bom_length) == (encoding, bom_length)


def test_sniff_accepts_a_multibyte_sequence_cut_at_the_end_of_the_sample() -> None:
    sample = ("nome\n" + "ç" * 100).encode()[:-1]
    assert sniff(sample).encoding == "utf-8"


def test_sniff_takes_a_damaged_utf8_file_as_utf8() -> None:
    sample = ("nome,cidade\n" + "José,São Paulo\n" * 50).encode() + b"\xff\n"
    assert sniff(sample).encoding == "utf-8"


@pytest.mark.parametrize(
    "data",
    [
        ("Иван Петров;Москва;ул. Ленина 5\n" * 200).encode("cp1251"),
        ("Καλημέρα κόσμε;Αθήνα\n" * 50).encode("iso8859_7"),
        ("你好世界;北京\n" * 50).encode("gb2312"),
        bytes(range(256)) * 8,
    ],
    ids=["cyrillic", "greek", "chinese", "binary"],
)
def test_sniff_rejects_other_encodings(data: bytes) -> None:
    with pytest.raises(FileRejected) as caught:
        sniff(data)
    assert caught.value.reason is Reason.UNSUPPORTED_ENCODING


@pytest.mark.parametrize(
    "data", [b"", b"  \r\n\t\n", b"\xef\xbb\xbf", b"\xff\xfe" + " \n".encode("utf-16-le")]
)
def test_sniff_rejects_an_empty_file(data: bytes) -> None:
    with pytest.raises(FileRejected) as caught:
        sniff(data)
    assert caught.value.reason is Reason.EMPTY_FILE
    assert isinstance(caught.value, FileRejectedError)


@pytest.mark.parametrize(
    ("first_line", "delimiter"),
    [
        ("a,b,c", ","),
        ("a;b;c", ";"),
        ("a\tb\tc", "\t"),
        ("a|b|c", "|"),
        ("nome", ","),
        ('"a;b;c",d', ","),
        ('"x\ny;z;w",a|b|c', "|"),
        ("a;b,c;d", ";"),
        ("a,b;c;d,e", ","),
    ],
)
def test_sniff_detects_the_delimiter(first_line: str, delimiter: str) -> None:
    assert sniff(f"\n{first_line}\n1,2;3\n".encode()).delimiter == delimiter


def test_sniff_keeps_given_values() -> None:
    assert sniff(b"a;b\n", encoding="utf-8", delimiter="|") == Sniffed("utf-8", "|", 0)
    assert sniff(b"a;b\n", encoding="latin-1") == Sniffed("iso8859-1", ";", 0)
    assert sniff(b"a;b\n", encoding="windows-1252").encoding == "cp1252"
    assert sniff(b"a;b\n", encoding="UTF-8-SIG").encoding == "utf-8"
    assert sniff("a\tb".encode("utf-16-le"), encoding="utf-16").encoding == "utf-16-le"


def test_a_bom_overrides_the_given_encoding() -> None:
    assert sniff(b"\xef\xbb\xbfa;b\n", encoding="cp1252") == Sniffed("utf-8", ";", 3)
    utf16 = b"\xfe\xff" + "a\tb".encode("utf-16-be")
    assert sniff(utf16, encoding="utf-16") == Sniffed("utf-16-be", "\t", 2)
    assert sniff(utf16, encoding="utf-8") == Sniffed("utf-16-be", "\t", 2)


@pytest.mark.parametrize("encoding", ["no-such-codec", "shift_jis", "base64"])
def test_sniff_rejects_an_unsupported_given_encoding(encoding: str) -> None:
    with pytest.raises(FileRejected) as caught:
        sniff(b"a,b\n", encoding=encoding)
    assert caught.value.reason is Reason.UNSUPPORTED_ENCODING


@pytest.mark.parametrize("delimiter", ["", ";;", '"', "\n"])
def test_invalid_delimiter_is_a_programming_error(delimiter: str) -> None:
    with pytest.raises(ValueError, match="delimiter"):
        sniff(b"a,b\n", delimiter=delimiter)


def test_file_rejected_carries_reason_and_detail() -> None:
    error = FileRejected(Reason.EMPTY_FILE, "nothing here")
    assert (error.reason, error.detail) == (Reason.EMPTY_FILE, "nothing here")
    assert isinstance(error, FileRejectedError)


# --- JSON Lines -----------------------------------------------------------------------------


def jsonl_outline(records: Iterable[JsonRecord]) -> list[tuple[int, Any]]:
    return [(r.line, r.values if r.reason is None else r.reason) for r in records]


def test_jsonl_records_and_value_conversion() -> None:
    data = (
        b'{"nome": "Ana", "idade": 30, "saldo": 1.50, "big": 123456789012345678901234567890,'
        b' "exp": 1E5, "ok": true, "no": false, "nada": null, "tags": ["a", 1],'
        b' "obj": {"k": "v\\u00e7"}}\n'
    )
    assert jsonl_outline(read_jsonl([data])) == [
        (
            1,
            {
                "nome": "Ana",
                "idade": "30",
                "saldo": "1.50",
                "big": "123456789012345678901234567890",
                "exp": "1E5",
                "ok": "true",
                "no": "false",
                "nada": "",
                "tags": '["a",1]',
                "obj": '{"k":"v\u00e7"}',
            },
        )
    ]


def test_jsonl_bad_lines_spoil_only_themselves() -> None:
    data = (
        b'{"a": "1"}\r\n'
        b"\r\n"
        b"   \n"
        b'{"a": oops}\n'
        b"[1]\n"
        b'"text"\n'
        b'{"a": "x\\u0000y"}\n'
        b'{"a": "\x00"}\n'
        b'{"a": "\xff"}\n'
        b'{"a": "last"}'
    )
    records = read_jsonl([data])
    assert jsonl_outline(records) == [
        (1, {"a": "1"}),
        (4, Reason.MALFORMED_JSON),
        (5, Reason.NOT_AN_OBJECT),
        (6, Reason.NOT_AN_OBJECT),
        (7, Reason.NUL_BYTE),
        (8, Reason.NUL_BYTE),
        (9, Reason.INVALID_ENCODING),
        (10, {"a": "last"}),
    ]
    assert records[1].raw == '{"a": oops}'
    assert records[6].raw == '{"a": "\\xff"}'
    assert records[-1].end_offset == len(data)


def test_jsonl_escaped_backslash_before_u0000_is_text() -> None:
    data = b'{"a": "\\\\u0000"}\n'
    assert jsonl_outline(read_jsonl([data])) == [(1, {"a": "\\u0000"})]


def test_jsonl_line_over_the_cap_is_too_long_even_if_blank() -> None:
    data = b'{"a": "1"}\n' + b" " * 30 + b"\n" + b'{"a": "2"}'
    for size in (1, 1000):
        got = jsonl_outline(read_jsonl(blocks_of(data, size), max_record_chars=20))
        assert got == [(1, {"a": "1"}), (2, Reason.FIELD_TOO_LONG), (3, {"a": "2"})]


def test_jsonl_value_over_the_field_cap() -> None:
    data = b'{"a": "' + b"x" * 11 + b'"}\n{"a": "ok"}\n'
    assert jsonl_outline(read_jsonl([data], max_field_chars=10)) == [
        (1, Reason.FIELD_TOO_LONG),
        (2, {"a": "ok"}),
    ]


def test_jsonl_long_line_keeps_memory_bounded() -> None:
    cap = 64 * KIB
    reader = JsonlReader(UTF8, max_record_chars=cap)
    records = reader.feed(b'{"a": "1"}\n{"a": "')
    most = 0
    for _ in range(40):
        records += reader.feed(b"x" * (16 * KIB))
        most = max(most, reader.buffered_chars)
    records += reader.feed(b'"}\n{"a": "2"}\n') + reader.finish()
    assert most <= 2 * cap
    assert jsonl_outline(records) == [(1, {"a": "1"}), (2, Reason.FIELD_TOO_LONG), (3, {"a": "2"})]
    assert records[1].end_offset == 11 + 7 + 40 * 16 * KIB + 3


JSONL = '{"n": "Jo\u00e3o", "v": 1}\r\n\n{"n": "\U0001f600"}\n[2]\n{"n": "fim"}'


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(JSONL.encode())), max_size=10))
def test_jsonl_any_split_gives_the_same_records(cuts: list[int]) -> None:
    data = JSONL.encode()
    assert read_jsonl(cut_at(data, cuts)) == read_jsonl([data])


def test_jsonl_utf16_with_bom() -> None:
    data = b"\xff\xfe" + JSONL.encode("utf-16-le")
    records = read_jsonl(blocks_of(data, 3), sniff(data))
    assert jsonl_outline(records) == jsonl_outline(read_jsonl([JSONL.encode()]))
    assert records[-1].end_offset == len(data)


# --- gzip -----------------------------------------------------------------------------------


def inflate(inflater: GzipInflater, blocks: Iterable[bytes]) -> bytes:
    return b"".join(inflater.feed(block) for block in blocks) + inflater.finish()


def test_gzip_round_trip_in_small_blocks() -> None:
    data = os.urandom(50_000) + b"a,b\n" * 100_000
    packed = gzip.compress(data)
    assert inflate(GzipInflater(10 * MIB), blocks_of(packed, 1000)) == data
    assert inflate(GzipInflater(len(data)), [packed]) == data  # exactly at the cap


def test_gzip_concatenated_members_and_zero_padding() -> None:
    packed = gzip.compress(b"one\n") + gzip.compress(b"two\n") + b"\x00" * 10
    for size in (1, 5, len(packed)):
        assert inflate(GzipInflater(MIB), blocks_of(packed, size)) == b"one\ntwo\n"


def test_gzip_bomb_stops_at_the_cap_with_little_memory() -> None:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(MIB)
    packed = b"".join(packer.compress(zeros) for _ in range(100)) + packer.flush()
    inflater = GzipInflater(10 * MIB, piece_bytes=256 * KIB)
    pieces = (piece for block in blocks_of(packed, 64 * KIB) for piece in inflater.feed_iter(block))
    tracemalloc.start()
    with pytest.raises(FileRejected) as caught:
        collections.deque(pieces, maxlen=0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert caught.value.reason is Reason.DECOMPRESSED_TOO_LARGE
    assert peak < 2 * MIB
    assert 10 * MIB < inflater.total_out <= 10 * MIB + 1


def test_gzip_bomb_through_feed_is_rejected() -> None:
    packed = gzip.compress(bytes(20 * MIB), compresslevel=9)
    with pytest.raises(FileRejected) as caught:
        inflate(GzipInflater(10 * MIB), blocks_of(packed, 256 * KIB))
    assert caught.value.reason is Reason.DECOMPRESSED_TOO_LARGE


@pytest.mark.parametrize(
    "packed",
    [gzip.compress(b"a,b\n" * 1000)[:-5], b"not gzip at all", gzip.compress(b"x") + b"garbage"],
    ids=["truncated", "not-gzip", "trailing-garbage"],
)
def test_gzip_damaged_stream_is_rejected(packed: bytes) -> None:
    with pytest.raises(FileRejected) as caught:
        inflate(GzipInflater(MIB), [packed])
    assert caught.value.reason is Reason.SOURCE_UNREADABLE


def test_gzip_then_csv_reader() -> None:
    data = TRICKY.encode()
    inflater = GzipInflater(MIB)
    reader = CsvReader(sniff(data))
    records: list[RawRecord] = []
    for block in blocks_of(gzip.compress(data), 7):
        for piece in inflater.feed_iter(block):
            records += reader.feed(piece)
    records += reader.feed(inflater.finish()) + reader.finish()
    assert records == read_csv([data])


# --- gzip: the ratio guard (issue 11, 7a) ------------------------------------------------------


def zero_bomb(total: int, *, members: int = 1, step: int = MIB) -> Iterator[bytes]:
    """A gzip stream of ``total`` zero bytes, compressed lazily a step at a time (never held)."""
    zeros = bytes(step)
    per_member = total // members
    for _ in range(members):
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        for _ in range(per_member // step):
            if block := packer.compress(zeros):
                yield block
        yield packer.flush()


def ratio_inflater(max_ratio: int = 200) -> GzipInflater:
    return GzipInflater(40 * 1024 * MIB, max_ratio=max_ratio)  # the default absolute cap


@pytest.mark.parametrize("members", [1, 4096], ids=["one-member", "many-small-members"])
def test_gzip_bomb_of_4_gib_fails_within_a_second_of_cpu(members: int) -> None:
    inflater = ratio_inflater()
    started = time.process_time()
    pieces = (
        p for block in zero_bomb(4 * 1024 * MIB, members=members) for p in inflater.feed_iter(block)
    )
    with pytest.raises(FileRejected) as caught:
        collections.deque(pieces, maxlen=0)
    assert time.process_time() - started < 1.0
    assert caught.value.reason is Reason.DECOMPRESSED_TOO_LARGE
    assert "200" in caught.value.detail
    assert inflater.total_out < 16 * MIB


def test_gzip_highly_compressible_but_small_file_is_not_held_to_the_ratio() -> None:
    data = b"00000000000;Maria;maria@example.com\n" * (6 * MIB // 36)  # ~6 MiB, ratio ~300
    packed = gzip.compress(data)
    assert len(data) / len(packed) > 200
    assert inflate(ratio_inflater(), blocks_of(packed, 64 * KIB)) == data


def test_gzip_multi_member_file_past_the_threshold_with_a_normal_ratio() -> None:
    rows = [f"{i * 7919 % 10**11:011d};Nome {i}\n" for i in range(500_000)]
    parts = ["".join(rows[i::3]).encode() for i in range(3)]  # ~3 x 4 MiB
    packed = b"".join(gzip.compress(part, compresslevel=1) for part in parts)
    assert len(b"".join(parts)) > 8 * MIB
    assert inflate(ratio_inflater(), blocks_of(packed, 256 * KIB)) == b"".join(parts)


def test_gzip_ratio_is_a_setting() -> None:
    from importer.core.models import Limits
    from importer.settings import Settings

    assert Limits().max_gzip_ratio == 200
    assert Settings.from_environ({"IMPORTER_MAX_GZIP_RATIO": "50"}).limits.max_gzip_ratio == 50


def test_the_pipeline_holds_gzip_to_the_ratio_setting() -> None:
    import uuid

    from importer.core.config import PipelineConfig
    from importer.core.models import ConflictStrategy, InputFormat, Job, JobStatus, Limits
    from importer.read.blocks import BlockParser

    job = Job(uuid.uuid4(), 1, JobStatus.IMPORTING, ConflictStrategy.MERGE, "f.csv.gz",
              InputFormat.CSV, 1000, 1)  # fmt: skip
    parser = BlockParser(job, "f.csv.gz", PipelineConfig(limits=Limits()))
    started = time.process_time()
    with pytest.raises(FileRejectedError) as caught:
        parse_all(parser, zero_bomb(4 * 1024 * MIB))
    assert caught.value.reason is Reason.DECOMPRESSED_TOO_LARGE
    assert time.process_time() - started < 1.0


def parse_all(parser: Any, blocks: Iterable[bytes]) -> None:
    for block in blocks:
        parser.push(block)
        while parser.pull() is not None:
            pass
