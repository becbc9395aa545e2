"""Workbooks the tests (and benchmarks/bench_xlsx.py) generate: openpyxl's write-only mode, then
optionally moved to a shared-strings table as Excel saves them, and hostile ones (a zip bomb, a
corrupt or truncated zip, an encrypted OLE container)."""

from __future__ import annotations

import io
import re
import struct
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from openpyxl import Workbook
from openpyxl.styles import NamedStyle

SHEET_XML = "xl/worksheets/sheet1.xml"
SHARED_STRINGS_XML = "xl/sharedStrings.xml"
_MAIN_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_SST_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"
_SST_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/sharedStrings"
# openpyxl (without lxml) writes every string inline: <c r="A1" t="inlineStr"><is><t>..</t></is>
_INLINE = re.compile(
    r'<c r="([A-Z]+[0-9]+)"((?: s="[0-9]+")?) t="inlineStr"><is><t(?: xml:space="preserve")?>'
    r"(.*?)</t></is></c>|"
    r'<c r="([A-Z]+[0-9]+)"((?: s="[0-9]+")?) t="inlineStr"><is><t(?: xml:space="preserve")? ?/>'
    r"</is></c>",
    re.DOTALL,
)
OLE_SIGNATURE = bytes.fromhex("D0CF11E0A1B11AE1")


def write_workbook(
    path: Path,
    rows: Iterable[Sequence[object]],
    *,
    sheet: str = "Planilha1",
    shared_strings: bool = True,
    sheets_before: Sequence[str] = (),
    date_format: str = "DD/MM/YYYY",
) -> Path:
    """A workbook whose sheet ``sheet`` holds ``rows`` (None: an empty cell; [] an empty row).

    Dates and datetimes get a date number format, as Excel gives them. ``sheets_before``: other
    sheets (holding one cell) placed first. ``shared_strings``: move the strings to a table.
    """
    workbook = Workbook(write_only=True)
    workbook.add_named_style(NamedStyle(name="date_cell", number_format=date_format))
    for name in sheets_before:
        workbook.create_sheet(name).append([f"not {sheet}"])
    target = workbook.create_sheet(sheet)
    for row in rows:
        target.append(list(row))
    workbook.save(path)
    if shared_strings:
        to_shared_strings(path, _sheet_part(len(sheets_before) + 1))
    return path


def _sheet_part(position: int) -> str:
    return f"xl/worksheets/sheet{position}.xml"


def to_shared_strings(path: Path, sheet_part: str = SHEET_XML) -> None:
    """Rewrite a sheet's inline strings as indexes into xl/sharedStrings.xml (Excel's way)."""
    with zipfile.ZipFile(path) as source:
        parts = {info.filename: source.read(info) for info in source.infolist()}
    table: dict[str, int] = {}
    count = 0

    def shared(match: re.Match[str]) -> str:
        nonlocal count
        count += 1
        if match.group(1) is None:
            ref, style, text = match.group(4), match.group(5), ""
        else:
            ref, style, text = match.group(1), match.group(2), match.group(3)
        index = table.setdefault(text, len(table))
        return f'<c r="{ref}"{style} t="s"><v>{index}</v></c>'

    parts[sheet_part] = _INLINE.sub(shared, parts[sheet_part].decode()).encode()
    items = "".join(f'<si><t xml:space="preserve">{text}</t></si>' for text in table)
    parts[SHARED_STRINGS_XML] = (
        f'<sst xmlns="{_MAIN_NS}" count="{count}" uniqueCount="{len(table)}">{items}</sst>'
    ).encode()
    types = parts["[Content_Types].xml"].decode()
    override = f'<Override PartName="/{SHARED_STRINGS_XML}" ContentType="{_SST_TYPE}" />'
    parts["[Content_Types].xml"] = types.replace("</Types>", override + "</Types>").encode()
    rels = parts["xl/_rels/workbook.xml.rels"].decode()
    relation = f'<Relationship Type="{_SST_REL}" Target="sharedStrings.xml" Id="rIdSst" />'
    rels = rels.replace("</Relationships>", relation + "</Relationships>")
    parts["xl/_rels/workbook.xml.rels"] = rels.encode()
    _write_parts(path, parts)


def add_dimension(path: Path, ref: str, sheet_part: str = SHEET_XML) -> None:
    """Give the sheet the ``<dimension ref=...>`` Excel writes (openpyxl's write-only mode does
    not, and its read-only mode then parses the whole sheet once more to size it)."""
    with zipfile.ZipFile(path) as source:
        data = source.read(sheet_part)
    head, _, rest = data.partition(b"<sheetData")
    replace_part(
        path, sheet_part, head + f'<dimension ref="{ref}" />'.encode() + b"<sheetData" + rest
    )


def replace_part(path: Path, part: str, data: bytes) -> None:
    """Put ``data`` as ``part`` of the workbook (e.g. a hand-written sheet XML)."""
    with zipfile.ZipFile(path) as source:
        parts = {info.filename: source.read(info) for info in source.infolist()}
    parts[part] = data
    _write_parts(path, parts)


def _write_parts(path: Path, parts: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as target:
        for name, data in parts.items():
            target.writestr(name, data)


def sheet_xml(rows_xml: str) -> bytes:
    """A worksheet part around ``<row>`` elements written by hand."""
    return f'<worksheet xmlns="{_MAIN_NS}"><sheetData>{rows_xml}</sheetData></worksheet>'.encode()


def bomb_workbook(path: Path, *, rows: int) -> Path:
    """A valid workbook whose sheet is ``rows`` identical rows: ~90 bytes of XML each, deflated
    about a thousand times (a 1M-row bomb is ~90 MB of XML in ~90 KB)."""
    write_workbook(path, [["nome", "cpf"]], shared_strings=False)
    with zipfile.ZipFile(path) as source:
        parts = {info.filename: source.read(info) for info in source.infolist()}
    row = '<row><c t="inlineStr"><is><t>x</t></is></c><c><v>52998224725</v></c></row>'
    head = parts[SHEET_XML].split(b"</sheetData>")[0]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as target:
        for name, data in parts.items():
            if name != SHEET_XML:
                target.writestr(name, data)
        with target.open(SHEET_XML, "w", force_zip64=True) as sheet:
            sheet.write(head)
            block = row.encode() * 10_000
            for _ in range(rows // 10_000):
                sheet.write(block)
            sheet.write(b"</sheetData></worksheet>")
    return path


def lying_bomb(path: Path, *, declared: int, rows: int) -> Path:
    """A bomb whose central directory understates the sheet's size (``declared`` bytes)."""
    bomb_workbook(path, rows=rows)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        info = archive.getinfo(SHEET_XML)
    # The central directory entry of the sheet: find its header by the name it carries.
    name = SHEET_XML.encode()
    central = data.rfind(b"PK\x01\x02", 0, data.rfind(name))
    # zip64 sizes live in the extra field; write a small 32-bit size and drop the zip64 extra.
    struct.pack_into("<I", data, central + 24, declared)
    struct.pack_into("<I", data, central + 20, info.compress_size)
    path.write_bytes(bytes(data))
    return path


def encrypted_workbook(path: Path, source: Path) -> Path:
    """An Excel workbook saved with a password: an OLE compound file (msoffcrypto-tool's)."""
    import msoffcrypto.format.ooxml

    with source.open("rb") as plain, path.open("wb") as out:
        msoffcrypto.format.ooxml.OOXMLFile(plain).encrypt("senha123", out)
    return path
