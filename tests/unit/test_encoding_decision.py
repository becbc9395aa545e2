"""Issue 11 point 1: UTF-8 vs Windows-1252 on evidence, never silent mojibake.

A damaged UTF-8 file (a lone Latin-1 byte, a truncated or an overlong sequence among valid
accented names) is read as UTF-8 whatever the share of bad bytes: its good rows come out exact
and each bad record is ``invalid_encoding`` on its line. Real Windows-1252 files stay cp1252.
A file read as a code page that holds UTF-8 sequences is flagged (``CsvReader.mojibake``).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from importer.core.models import Reason
from importer.read.csvfile import CsvReader
from importer.read.jsonl import JsonlReader
from importer.read.records import RawRecord, Sniffed
from importer.read.sniff import Utf8Evidence, prefers_utf8, sniff, utf8_evidence
from tests.unit.csv_readers import csv_reader_tests

pytest_generate_tests, csv_reader = csv_reader_tests(globals(), "read(")

KIB = 1024
SAMPLE = 64 * KIB  # what the pipeline sniffs
NAMES = ["Conceição", "José", "Müller", "😀 Emoji", "Gonçalves", "Ñandú", "São João"]
CORRUPT = [b"Jo\xe3o", b"Concei\xc3", b"Sl\xc0\xafsh", b"\xff\xfe\xfd", b"Ana \xe9\xe0"]


def read(data: bytes, sniffed: Sniffed, block: int = 4096) -> list[RawRecord]:
    reader = CsvReader(sniffed)
    records: list[RawRecord] = []
    for start in range(0, len(data), block):
        records += reader.feed(data[start : start + block])
    return records + reader.finish()


def damaged_file(rows: int, bad_lines: set[int], names: list[str] = NAMES) -> bytes:
    """A UTF-8 CSV (header on line 1) whose lines in bad_lines hold a corrupt name."""
    out = [b"nome;cpf\n"]
    for line in range(2, rows + 2):
        if line in bad_lines:
            name = CORRUPT[line % len(CORRUPT)]
        else:
            name = names[line % len(names)].encode()
        out.append(name + b";%011d\n" % line)
    return b"".join(out)


def check_exact(data: bytes, bad_lines: set[int]) -> None:
    sniffed = sniff(data[:SAMPLE])
    assert sniffed.encoding == "utf-8"
    records = read(data, sniffed)
    assert records[0].fields == ["nome", "cpf"]
    lines = data.split(b"\n")
    for record in records[1:]:
        if record.line in bad_lines:
            assert record.reason is Reason.INVALID_ENCODING, record.line
        else:
            assert record.reason is None, record.line
            assert record.fields is not None
            assert ";".join(record.fields).encode() == lines[record.line - 1]  # byte-exact
    assert {r.line for r in records if r.reason is not None} == bad_lines


# --- the decision, as a pure function ---------------------------------------------------------


@pytest.mark.parametrize(
    ("evidence", "utf8"),
    [
        (Utf8Evidence(0, 0, 0), True),  # ASCII
        (Utf8Evidence(5, 0, 0), True),
        (Utf8Evidence(0, 0, 1), False),  # high bytes, no valid sequence: a code page
        (Utf8Evidence(3, 0, 5), True),  # a few bad records outnumbering the good names
        (Utf8Evidence(1, 0, 16), True),
        (Utf8Evidence(0, 1, 60), True),  # one emoji (4 bytes) is strong evidence
        (Utf8Evidence(2, 0, 800), False),  # cp1252 text with two accidental pairs
    ],
)
def test_prefers_utf8(evidence: Utf8Evidence, utf8: bool) -> None:
    assert prefers_utf8(evidence) is utf8


def test_evidence_counts_sequences_not_bytes() -> None:
    # ç ã (two bytes each), 😀 (four), then three corrupt sequences: a lone byte, a truncated
    # sequence, an overlong one (two bytes, one run)
    sample = "ção😀;".encode() + b"\xe3;" + b"\xe2\x82;" + b"\xc0\xaf\n"
    assert utf8_evidence(sample) == Utf8Evidence(short=2, long=1, corrupt=3)


def test_a_sequence_cut_by_the_sample_end_is_not_corruption() -> None:
    for cut in (1, 2, 3):
        assert utf8_evidence(("a😀" * 10).encode()[:-cut]).corrupt == 0


@given(st.text(min_size=1, max_size=200), st.integers(0, 800))
def test_any_utf8_text_is_utf8_whatever_the_sample_cut(text: str, cut: int) -> None:
    data = text.encode()  # st.text() holds no lone surrogates
    assert prefers_utf8(utf8_evidence(data[: max(1, len(data) - cut % 4)]))


# --- damaged UTF-8 files ----------------------------------------------------------------------


def test_small_file_with_more_corrupt_records_than_accents_is_utf8() -> None:
    # three good accented names, five corrupt records (lone byte, truncated, overlong...)
    data = damaged_file(8, {2, 4, 6, 7, 9}, names=["Conceição", "😀", "Zé"])
    check_exact(data, {2, 4, 6, 7, 9})


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_large_damaged_file_is_utf8(where: str) -> None:
    rows = 6000  # ~130 KiB: past the sample
    first = {"start": 2, "middle": rows // 2, "end": rows - 20}[where]
    bad = set(range(first, first + 20))
    check_exact(damaged_file(rows, bad), bad)


def test_corrupt_start_of_a_large_file_with_few_accents_is_utf8() -> None:
    # the sample: 60 corrupt records first, then mostly ASCII names with a few accents
    names = ["Ana Silva", "Paulo Souza", "Maria", "Conceição"]
    bad = set(range(2, 62))
    check_exact(damaged_file(5000, bad, names=names), bad)


def test_damage_at_the_64_kib_boundary() -> None:
    row = "Conceição;00000000001\n".encode()
    body = b"nome;cpf\n" + row * (SAMPLE // len(row) - 1)
    # the sample ends in the middle of the "ç" of a good row: not corruption
    filler = b"x" * (SAMPLE - len(b"Concei") - 1 - len(body) - 3) + b";1\n"
    data = body + filler + row + b"Jo\xe3o;2\n" + row
    assert data[SAMPLE - 1 : SAMPLE + 1] == "ç".encode()
    sniffed = sniff(data[:SAMPLE])
    assert sniffed.encoding == "utf-8"
    for block in (SAMPLE, 4096, 7):
        records = read(data, sniffed, block=block)
        assert [r.line for r in records if r.reason is not None] == [records[-2].line]
        assert records[-3].fields == ["Conceição", "00000000001"]
        assert records[-1].fields == ["Conceição", "00000000001"]


def test_truncated_sequence_right_before_the_boundary_is_corruption_there() -> None:
    good = "São Paulo;1\n".encode()
    data = good * 100
    data = data + b"x" * (SAMPLE - len(data) - 4) + b"\xc3;2\n" + good * 10  # "\xc3" then ";"
    sniffed = sniff(data[:SAMPLE])
    assert sniffed.encoding == "utf-8"
    records = read(data, sniffed)
    assert [r.line for r in records if r.reason is Reason.INVALID_ENCODING] == [101]


def test_damaged_jsonl_is_utf8_and_reports_the_bad_lines() -> None:
    data = b'{"nome": "Concei\xc3\xa7\xc3\xa3o"}\n{"nome": "Jo\xe3o"}\n{"nome": "x\xff"}\n'
    sniffed = sniff(data)
    assert sniffed.encoding == "utf-8"
    reader = JsonlReader(sniffed)
    records = reader.feed(data) + reader.finish()
    assert records[0].values == {"nome": "Conceição"}
    assert [r.reason for r in records[1:]] == [Reason.INVALID_ENCODING] * 2


# --- real Windows-1252 files -----------------------------------------------------------------


CP1252_NAMES = ["João", "Conceição", "Gonçalves", "José", "Ângela", "Müller", "Nº 5 \u2013 “Sé”"]


@pytest.mark.parametrize("rows", [1, 5, 300, 5000])
def test_real_cp1252_files_stay_cp1252(rows: int) -> None:
    rng = random.Random(rows)
    lines = ["nome;cidade"] + [
        f"{rng.choice(CP1252_NAMES)};{rng.choice(['São Paulo', 'Goiânia', 'Maceió'])}"
        for _ in range(rows)
    ]
    data = "\n".join(lines).encode("cp1252")
    assert sniff(data[:SAMPLE]).encoding == "cp1252"
    reader = CsvReader(sniff(data[:SAMPLE]))
    records = reader.feed(data) + reader.finish()
    assert [";".join(r.fields or []) for r in records] == lines
    assert reader.mojibake is None


def test_cp1252_with_a_few_accidental_utf8_pairs_stays_cp1252() -> None:
    # "JOSÉ”" is b"\xc9\x94": a valid two-byte UTF-8 sequence, among hundreds of accents
    data = ("nome;cidade\n" + "“JOSÉ”;São Paulo\n" + "João;Goiânia\n" * 400).encode("cp1252")
    assert sniff(data[:SAMPLE]).encoding == "cp1252"


# --- the mojibake watch ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seen"),
    [
        ("Conceição", "Ã§"),
        ("it\u2019s", "â€™"),
        ("😀", "ðŸ\u02dc€"),
        ("Nº", "Âº"),
        ("€ 5", "â\u201a¬"),
    ],
)
def test_utf8_read_as_cp1252_is_flagged(text: str, seen: str) -> None:
    data = ("nome\n" + "Ana\n" * 3000 + text + "\n").encode()
    for encoding in ("cp1252", "iso8859-1"):
        reader = CsvReader(Sniffed(encoding, ";", 0))
        for start in range(0, len(data), 1000):
            reader.feed(data[start : start + 1000])
        reader.finish()
        latin1 = seen.encode("cp1252").decode("latin-1")
        assert reader.mojibake == (seen if encoding == "cp1252" else latin1)


def test_utf8_read_as_utf8_is_not_flagged() -> None:
    reader = JsonlReader(Sniffed("utf-8", ",", 0))
    reader.feed('{"nome": "Conceição"}\n'.encode())
    assert reader.mojibake is None


def test_mojibake_past_a_resume_offset_is_flagged_by_the_resumed_reader() -> None:
    data = ("nome\n" + "Ana\n" * 100 + "Conceição\n").encode()
    reader = CsvReader(Sniffed("cp1252", ";", 0), start_line=50, start_offset=5 + 4 * 49)
    reader.feed(data[5 + 4 * 49 :])
    assert reader.mojibake == "Ã§"
