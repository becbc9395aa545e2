"""XLSX input (importer/read/xlsx.py): cells as the user sees them, the sheet's rows as records, and
the workbooks it must refuse (corrupt, truncated, password-protected, zip bombs)."""

from __future__ import annotations

import datetime as dt
import os
import time
import uuid
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from importer.core.config import PipelineConfig
from importer.core.errors import FileRejectedError
from importer.core.layout import parse_layout
from importer.core.models import (
    Batch,
    Checkpoint,
    ConflictStrategy,
    InputFormat,
    Job,
    JobStatus,
    Limits,
    Reason,
)
from importer.read.blocks import BlockParser
from importer.read.records import RawRecord
from importer.read.xlsx import MAX_RATIO, SheetReader, cell_text, check_members, row_fields
from tests import xlsx_support as xs

EXACT = 2**53


# --- cells -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, ""),
        ("", ""),
        (" Ana ", " Ana "),
        ("01234567890", "01234567890"),
        (52998224725, "52998224725"),
        (52998224725.0, "52998224725"),
        (5.29982e10, "52998200000"),
        (-0.0, "0"),
        (1.5, "1.5"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1e20, "1e+20"),
        (True, "TRUE"),
        (False, "FALSE"),
        (dt.datetime(1990, 5, 17), "1990-05-17"),
        (dt.date(1990, 5, 17), "1990-05-17"),
        (dt.datetime(1990, 5, 17, 10, 30), "1990-05-17T10:30:00"),
        (dt.time(10, 30), "10:30:00"),
        (dt.timedelta(hours=26, minutes=5), "26:05:00"),
        ("#N/A", "#N/A"),
    ],
)
def test_cell_text(value: object, text: str) -> None:
    assert cell_text(value) == text


@given(st.integers(min_value=-(EXACT - 1), max_value=EXACT - 1))
def test_integers_round_trip_as_digits_whether_stored_as_int_or_float(number: int) -> None:
    assert cell_text(number) == str(number)
    assert cell_text(float(number)) == str(number)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_number_reads_back_as_itself(number: float) -> None:
    assert float(cell_text(number)) == number
    assert "e" not in cell_text(number) or abs(number) >= EXACT or not number.is_integer()


def test_rows_are_as_wide_as_the_header() -> None:
    assert row_fields(["nome", "cpf", None], None) == ["nome", "cpf"]
    assert row_fields(["Ana"], 3) == ["Ana", "", ""]
    assert row_fields(["Ana", 1, None, None, None], 3) == ["Ana", "1", ""]
    assert row_fields(["Ana", None, None, "x"], 2) == ["Ana", "", "", "x"]  # too many fields


# --- the sheet ---------------------------------------------------------------------------------


def records(path: Path, **options: object) -> list[RawRecord]:
    out: list[RawRecord] = []
    with path.open("rb") as file:
        reader = SheetReader(file, **options)  # type: ignore[arg-type]
        while (batch := reader.read(3)) is not None:
            out += batch
    return out


def lines(path: Path, **options: object) -> list[tuple[int, list[str] | None]]:
    return [(r.line, r.fields) for r in records(path, **options)]


ROWS: list[list[object]] = [
    ["nome", "cpf", "nascimento", "ativo", "telefone"],
    ["Ana", 52998224725, dt.date(1990, 5, 17), True, 11987654321],
    [],
    [],
    ["Bia", 52998224725.0, dt.datetime(1990, 5, 17, 10, 30)],
    [None, None, None],
    ["Caio", "529.982.247-25", None, False, None, None, None],
    ["Duda", "1", None, None, None, "extra"],
]
EXPECTED = [
    (1, ["nome", "cpf", "nascimento", "ativo", "telefone"]),
    (2, ["Ana", "52998224725", "1990-05-17", "TRUE", "11987654321"]),
    (5, ["Bia", "52998224725", "1990-05-17T10:30:00", "", ""]),
    (7, ["Caio", "529.982.247-25", "", "FALSE", ""]),
    (8, ["Duda", "1", "", "", "", "extra"]),
]


@pytest.mark.parametrize("shared", [True, False], ids=["shared-strings", "inline-strings"])
def test_sheet_rows_are_records_numbered_by_row(tmp_path: Path, shared: bool) -> None:
    path = xs.write_workbook(tmp_path / "c.xlsx", ROWS, shared_strings=shared)
    with zipfile.ZipFile(path) as archive:
        assert (xs.SHARED_STRINGS_XML in archive.namelist()) is shared
    assert lines(path) == EXPECTED
    assert all(r.end_line == r.line + 1 for r in records(path))


def test_numbers_written_as_floats_or_exponents_are_their_digits(tmp_path: Path) -> None:
    path = xs.write_workbook(tmp_path / "n.xlsx", [["cpf"]], shared_strings=False)
    xs.replace_part(
        path,
        xs.SHEET_XML,
        xs.sheet_xml(
            '<row r="1"><c r="A1" t="inlineStr"><is><t>cpf</t></is></c></row>'
            '<row r="2"><c r="A2"><v>52998224725.0</v></c></row>'
            '<row r="3"><c r="A3"><v>5.29982E+10</v></c></row>'
            '<row r="4"><c r="A4" t="str"><v>formula text</v></c></row>'
            '<row r="6"><c r="A6" t="b"><v>1</v></c></row>'
        ),
    )
    assert lines(path) == [
        (1, ["cpf"]),
        (2, ["52998224725"]),
        (3, ["52998200000"]),
        (4, ["formula text"]),
        (6, ["TRUE"]),
    ]


def test_a_formula_reads_as_its_cached_value(tmp_path: Path) -> None:
    path = xs.write_workbook(tmp_path / "f.xlsx", [["n", "cpf"], ["Ana", "=1+1"]])
    xs.replace_part(
        path,
        xs.SHEET_XML,
        xs.sheet_xml(
            '<row r="1"><c r="A1" t="inlineStr"><is><t>cpf</t></is></c></row>'
            '<row r="2"><c r="A2"><f>52998224725*1</f><v>52998224725</v></c></row>'
        ),
    )
    assert lines(path) == [(1, ["cpf"]), (2, ["52998224725"])]


def test_the_layout_sheet_chooses_by_name_or_position(tmp_path: Path) -> None:
    path = xs.write_workbook(
        tmp_path / "s.xlsx", [["cpf"], ["1"]], sheet="Contatos", sheets_before=["Resumo"]
    )
    assert lines(path) == [(1, ["not Contatos"])]  # the first sheet by default
    assert lines(path, sheet="Contatos") == [(1, ["cpf"]), (2, ["1"])]
    assert lines(path, sheet=1) == [(1, ["cpf"]), (2, ["1"])]
    with pytest.raises(FileRejectedError) as caught:
        lines(path, sheet="Clientes")
    assert caught.value.reason is Reason.UNREADABLE_WORKBOOK
    assert "Contatos" in caught.value.detail
    assert parse_layout({"sheet": "Contatos"}).sheet == "Contatos"
    assert parse_layout({"sheet": 2}).sheet == 2


def test_too_long_cells_make_the_row_invalid_not_the_file(tmp_path: Path) -> None:
    path = xs.write_workbook(tmp_path / "l.xlsx", [["nome", "cpf"], ["x" * 50, "1"], ["a", "2"]])
    found = records(path, max_field_chars=40, max_record_chars=200)
    assert [(r.line, r.reason) for r in found] == [(1, None), (2, Reason.FIELD_TOO_LONG), (3, None)]
    assert found[1].raw.startswith("x" * 40)


def test_a_stale_dimension_does_not_cut_rows(tmp_path: Path) -> None:
    path = xs.write_workbook(tmp_path / "d.xlsx", [["cpf"]], shared_strings=False)
    rows = "".join(f'<row r="{n}"><c r="A{n}"><v>{n}</v></c></row>' for n in range(1, 6))
    data = xs.sheet_xml(rows).replace(b"<sheetData>", b'<dimension ref="A1:A2"/><sheetData>')
    xs.replace_part(path, xs.SHEET_XML, data)
    assert [line for line, _ in lines(path)] == [1, 2, 3, 4, 5]


# --- workbooks refused -----------------------------------------------------------------------


def rejection(path: Path, **options: object) -> FileRejectedError:
    with pytest.raises(FileRejectedError) as caught:
        records(path, **options)
    return caught.value


def test_random_bytes_and_a_truncated_zip_are_unreadable(tmp_path: Path) -> None:
    noise = tmp_path / "noise.xlsx"
    noise.write_bytes(os.urandom(5000))
    assert rejection(noise).reason is Reason.UNREADABLE_WORKBOOK
    whole = xs.write_workbook(tmp_path / "w.xlsx", ROWS)
    cut = tmp_path / "cut.xlsx"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert rejection(cut).reason is Reason.UNREADABLE_WORKBOOK
    empty = tmp_path / "empty.xlsx"
    empty.write_bytes(b"")
    assert rejection(empty).reason is Reason.EMPTY_FILE  # as an empty CSV


def test_a_damaged_sheet_is_unreadable(tmp_path: Path) -> None:
    path = xs.write_workbook(tmp_path / "x.xlsx", [["cpf"]], shared_strings=False)
    xs.replace_part(path, xs.SHEET_XML, xs.sheet_xml('<row r="1"><c r="A1"><v>1</v></c>'))
    assert rejection(path).reason is Reason.UNREADABLE_WORKBOOK


def test_a_password_protected_workbook_is_unreadable(tmp_path: Path) -> None:
    plain = xs.write_workbook(tmp_path / "plain.xlsx", ROWS)
    locked = xs.encrypted_workbook(tmp_path / "locked.xlsx", plain)
    assert locked.read_bytes().startswith(xs.OLE_SIGNATURE)
    error = rejection(locked)
    assert error.reason is Reason.UNREADABLE_WORKBOOK
    assert "password" in error.detail


def test_a_zip_bomb_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    bomb = xs.bomb_workbook(tmp_path / "bomb.xlsx", rows=1_000_000)  # ~75 MB of XML
    with zipfile.ZipFile(bomb) as archive:
        sheet = archive.getinfo(xs.SHEET_XML)
    assert sheet.file_size > MAX_RATIO * sheet.compress_size
    started = time.perf_counter()
    assert rejection(bomb).reason is Reason.DECOMPRESSED_TOO_LARGE  # by its ratio
    assert rejection(bomb, max_decompressed_bytes=10**6).reason is Reason.DECOMPRESSED_TOO_LARGE
    assert time.perf_counter() - started < 1.0


def test_a_bomb_that_understates_its_size_is_cut_at_the_stated_size(tmp_path: Path) -> None:
    bomb = xs.lying_bomb(tmp_path / "liar.xlsx", declared=100_000, rows=1_000_000)
    assert rejection(bomb).reason is Reason.UNREADABLE_WORKBOOK


def test_check_members_caps_the_total_and_refuses_unknown_compression() -> None:
    def member(
        name: str, size: int, packed: int, kind: int = zipfile.ZIP_DEFLATED
    ) -> zipfile.ZipInfo:
        info = zipfile.ZipInfo(name)
        info.file_size, info.compress_size, info.compress_type = size, packed, kind
        return info

    check_members([member("a", 10**6, 10**3), member("b", 10**6, 10**5)], 2 * 10**6)
    with pytest.raises(FileRejectedError) as caught:
        check_members([member("a", 10**6, 10**6), member("b", 10**6 + 1, 10**6)], 2 * 10**6)
    assert caught.value.reason is Reason.DECOMPRESSED_TOO_LARGE
    with pytest.raises(FileRejectedError) as caught:
        check_members([member("a", 10, 10, zipfile.ZIP_BZIP2)], 2 * 10**6)
    assert caught.value.reason is Reason.UNREADABLE_WORKBOOK


# --- in the pipeline: spooled, chunked, resumed ------------------------------------------------


def xlsx_job(chunk_size: int) -> Job:
    return Job(
        uuid.uuid4(), 1, JobStatus.IMPORTING, ConflictStrategy.MERGE, "f", InputFormat.XLSX,
        chunk_size, 2,
    )  # fmt: skip


def parse(job: Job, data: bytes, checkpoint: Checkpoint | None = None) -> list[Batch]:
    parser = BlockParser(job, "contacts.xlsx", PipelineConfig(limits=Limits()), checkpoint)
    batches: list[Batch] = []
    try:
        for start in range(0, len(data), 1000):
            parser.push(data[start : start + 1000])
            while (pulled := parser.pull()) is not None:
                batches += pulled
        while (pulled := parser.pull_rows()) is not None:
            batches += pulled
        return batches + parser.finish()
    finally:
        parser.close()


def test_a_resumed_workbook_gives_the_batches_after_its_checkpoint(tmp_path: Path) -> None:
    rows: list[list[object]] = [["nome", "cpf"]]
    rows += [[] if n % 7 == 0 else [f"n{n}", 52998224725 if n % 5 else "bad"] for n in range(1, 40)]
    data = xs.write_workbook(tmp_path / "r.xlsx", rows).read_bytes()
    job = xlsx_job(chunk_size=4)
    whole = parse(job, data)
    assert sum(b.rows_read for b in whole) == 39 - 5  # empty rows are not counted
    for chunk_no in range(max(b.chunk_no for b in whole)):
        last = next(b for b in whole if b.chunk_no == chunk_no)
        resumed = parse(job, data, Checkpoint(chunk_no, last.end_offset, last.end_line))
        assert resumed == [b for b in whole if b.chunk_no > chunk_no]


def test_rows_past_excels_last_row_are_refused(tmp_path: Path) -> None:
    path = xs.write_workbook(tmp_path / "far.xlsx", [["cpf"]], shared_strings=False)
    far = (
        '<row r="1"><c r="A1"><v>1</v></c></row><row r="1048577"><c r="A1048577"><v>2</v></c></row>'
    )
    xs.replace_part(path, xs.SHEET_XML, xs.sheet_xml(far))
    error = rejection(path)
    assert error.reason is Reason.UNREADABLE_WORKBOOK
    assert "1048576" in error.detail


def test_an_entity_expansion_bomb_in_the_sheet_is_unreadable(tmp_path: Path) -> None:
    path = xs.write_workbook(tmp_path / "lol.xlsx", [["cpf"]], shared_strings=False)
    entities = '<!ENTITY a0 "lollollollollollollollollollol">' + "".join(
        f'<!ENTITY a{n} "{f"&a{n - 1};" * 10}">' for n in range(1, 10)
    )
    sheet = xs.sheet_xml('<row r="1"><c r="A1" t="inlineStr"><is><t>&a9;</t></is></c></row>')
    xs.replace_part(path, xs.SHEET_XML, f"<!DOCTYPE worksheet [{entities}]>".encode() + sheet)
    started = time.perf_counter()
    assert rejection(path).reason is Reason.UNREADABLE_WORKBOOK
    assert time.perf_counter() - started < 5
