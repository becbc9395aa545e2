"""XLSX input: a workbook's sheet read row by row as the CSV reader's records (no network, no DB).

A workbook is a zip, which needs random access: the pipeline copies the upload to a temporary
file (:class:`WorkbookSpool`, bounded by the file size cap) and :class:`SheetReader` streams the
chosen sheet from it with openpyxl's read-only mode (rows come from an incremental XML parse;
benchmarks/README.md says why openpyxl and not python-calamine).

Before openpyxl reads a byte, :func:`check_members` bounds what the archive may expand to: the
sizes its central directory declares (Python's zipfile never returns more than a member's declared
size: a member that lies ends in a CRC or XML error) must stay under the decompression cap, no
large member may expand more than ``MAX_RATIO`` times, and the shared-strings table, which is
held whole, has its own cap. Only stored and deflated members are read (what Excel writes).

Cells are read as the user sees them (:func:`cell_text`): an integral number is its digits
(``52998224725.0`` → ``52998224725``), a date its ISO date, a boolean ``TRUE``/``FALSE``, an
empty cell ``""``, a formula its cached value. A record's ``line`` is the sheet's row number and
its ``end_offset`` the workbook file's bytes read so far, the whole file at the sheet's end (for
progress: a resumed run re-reads the sheet and skips to ``end_line``). Rows are as wide as the
first one (the header): shorter rows are padded with empty cells, empty cells past it dropped.
"""

from __future__ import annotations

import datetime as dt
import io
import math
import tempfile
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any
from xml.etree.ElementTree import ParseError

from importer.core.errors import FileRejectedError
from importer.core.models import Reason
from importer.read.records import RAW_CHARS, RawRecord

MAX_SHEET_ROWS = 1_048_576  # Excel's last row: a sheet past it was not made by a spreadsheet
MAX_RATIO = 200  # deflate expansion allowed to a large member (sheets of real data: 5-20x)
RATIO_FLOOR = 16 * 1024**2  # members smaller than this may expand any amount
MAX_SHARED_STRINGS_BYTES = 512 * 1024**2  # the shared-strings table is held whole in memory
ROWS_PER_READ = 2000  # rows turned into records per call of SheetReader.read
OLE_SIGNATURE = bytes.fromhex("D0CF11E0A1B11AE1")  # an encrypted workbook, or a legacy .xls
_READABLE = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
_EXACT_FLOAT = 2**53  # integral floats below this are exact integers
# What a damaged workbook makes zipfile, zlib, ElementTree or openpyxl raise.
_DAMAGED = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    ParseError,
    zlib.error,
    EOFError,
    KeyError,
    IndexError,
    ValueError,
    TypeError,
    NotImplementedError,
    OSError,
)

# openpyxl warns about parts it drops (data validation, extensions, a missing default style) and
# about dates out of range (read as #VALUE!): nothing an import can act on.
warnings.filterwarnings("ignore", category=UserWarning, module="openpyxl")


def unreadable(detail: str) -> FileRejectedError:
    return FileRejectedError(Reason.UNREADABLE_WORKBOOK, detail)


# --- cells -----------------------------------------------------------------------------------


def cell_text(value: object) -> str:
    """A cell's value as the user sees it in the sheet, as text."""
    if type(value) is str:
        return value
    text_of = _TEXT_OF.get(type(value))
    return text_of(value) if text_of is not None else str(value)


def datetime_text(value: dt.datetime) -> str:
    """A date cell (Excel has no date type: a date is a datetime at midnight) as its ISO date;
    a date and time as ISO date and time."""
    if value.time() == dt.time() and value.tzinfo is None:
        return value.date().isoformat()
    return value.isoformat()


def number_text(value: float) -> str:
    """An integral number as its digits (no ``.0``, no exponent); others as their shortest text."""
    if math.isfinite(value) and value.is_integer() and abs(value) < _EXACT_FLOAT:
        return str(int(value))
    return repr(value)


def duration_text(value: dt.timedelta) -> str:
    """A duration cell (``[h]:mm:ss``) as hours:minutes:seconds."""
    seconds = round(value.total_seconds())
    sign = "-" if seconds < 0 else ""
    hours, rest = divmod(abs(seconds), 3600)
    return f"{sign}{hours}:{rest // 60:02d}:{rest % 60:02d}"


_TEXT_OF: dict[type, Callable[[Any], str]] = {
    type(None): lambda _: "",
    bool: lambda value: "TRUE" if value else "FALSE",
    int: str,
    float: number_text,
    dt.datetime: datetime_text,
    dt.date: dt.date.isoformat,
    dt.time: dt.time.isoformat,
    dt.timedelta: duration_text,
}


def row_fields(values: Sequence[object], width: int | None) -> list[str]:
    """A row's cells as text, as wide as ``width`` (the header's; None: as the row is)."""
    fields = [cell_text(value) for value in values]
    if width is None:
        while fields and not fields[-1]:
            fields.pop()
        return fields
    if len(fields) < width:
        fields.extend([""] * (width - len(fields)))
    while len(fields) > width and not fields[-1]:
        fields.pop()
    return fields


# --- the archive -----------------------------------------------------------------------------


def check_members(members: Sequence[zipfile.ZipInfo], max_decompressed_bytes: int) -> None:
    """Refuse an archive that would expand past the caps, before any of it is inflated."""
    total = 0
    for member in members:
        if member.flag_bits & 0x1:
            raise unreadable(f"{member.filename} is encrypted")
        if member.compress_type not in _READABLE:
            raise unreadable(f"{member.filename}: compression {member.compress_type} not supported")
        total += member.file_size
        if total > max_decompressed_bytes:
            raise FileRejectedError(
                Reason.DECOMPRESSED_TOO_LARGE,
                f"the workbook expands past the cap of {max_decompressed_bytes} bytes",
            )
        if member.file_size > RATIO_FLOOR and member.file_size > MAX_RATIO * member.compress_size:
            raise FileRejectedError(
                Reason.DECOMPRESSED_TOO_LARGE,
                f"{member.filename} expands {member.file_size // max(member.compress_size, 1)}"
                f" times (at most {MAX_RATIO})",
            )
        if member.filename.lower().endswith("sharedstrings.xml") and (
            member.file_size > MAX_SHARED_STRINGS_BYTES
        ):
            raise FileRejectedError(
                Reason.DECOMPRESSED_TOO_LARGE,
                f"the shared-strings table passes {MAX_SHARED_STRINGS_BYTES} bytes",
            )


def open_archive(file: IO[bytes], max_decompressed_bytes: int) -> None:
    """Check that file is a zip within the caps (it is read again by openpyxl)."""
    file.seek(0)
    if file.read(len(OLE_SIGNATURE)) == OLE_SIGNATURE:
        raise unreadable("a password-protected workbook or a legacy .xls (an OLE container)")
    file.seek(0)
    try:
        with zipfile.ZipFile(file) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise unreadable(f"not an XLSX workbook: {exc}") from exc
    check_members(members, max_decompressed_bytes)
    file.seek(0)


class WorkbookSpool:
    """The upload copied to an anonymous temporary file: a zip is read from its end."""

    def __init__(self) -> None:
        self.file: IO[bytes] = tempfile.TemporaryFile(prefix="importer-xlsx-")  # noqa: SIM115
        self.size = 0

    def write(self, data: bytes) -> None:
        self.file.write(data)
        self.size += len(data)

    def close(self) -> None:
        self.file.close()


# --- the sheet -------------------------------------------------------------------------------


class SheetReader:
    """A workbook's sheet as records: ``sheet`` is a name or a 0-based position (default: the
    first worksheet). Raises FileRejectedError (``unreadable_workbook``,
    ``decompressed_too_large``) for a workbook it cannot read, at the start or mid-sheet."""

    def __init__(
        self,
        file: IO[bytes],
        *,
        sheet: str | int | None = None,
        max_field_chars: int = 65536,
        max_record_chars: int = 1048576,
        max_decompressed_bytes: int = 40 * 1024**3,
    ) -> None:
        self._size = file.seek(0, io.SEEK_END)
        if self._size == 0:
            raise FileRejectedError(Reason.EMPTY_FILE, "the file holds no data")
        open_archive(file, max_decompressed_bytes)
        from openpyxl import load_workbook  # here: 0.3 s of import the CSV-only runs never pay

        self._file = file
        self._max_field = max_field_chars
        self._max_record = max_record_chars
        self._width: int | None = None
        self._line = 0  # the sheet's row last read
        try:
            self._workbook = load_workbook(file, read_only=True, data_only=True, keep_links=False)
        except _DAMAGED as exc:
            raise unreadable(f"the workbook cannot be read: {exc!r}") from exc
        self.sheet_name, self._rows = self._open_sheet(sheet)

    def _open_sheet(self, sheet: str | int | None) -> tuple[str, Iterator[tuple[object, ...]]]:
        names = self._workbook.sheetnames
        sheets = self._workbook.worksheets
        try:
            if sheet is None or isinstance(sheet, int):
                chosen = sheets[sheet or 0]
            else:
                chosen = self._workbook[sheet]
        except (IndexError, KeyError):
            raise unreadable(f"no sheet {sheet!r} in the workbook (sheets: {names})") from None
        if not hasattr(chosen, "reset_dimensions"):
            raise unreadable(f"sheet {chosen.title!r} is not a worksheet")
        chosen.reset_dimensions()  # a stale <dimension> would cut the rows past it
        return chosen.title, chosen.iter_rows(values_only=True)

    def read(self, count: int = ROWS_PER_READ) -> list[RawRecord] | None:
        """The records of the next ``count`` rows (empty rows skipped); None at the sheet's end."""
        rows: list[tuple[int, tuple[object, ...]]] = []
        ended = False
        try:
            for _ in range(count):
                values = next(self._rows, None)
                if values is None:
                    ended = True
                    break
                rows.append((self._next_line(), values))
        except _DAMAGED as exc:
            raise unreadable(f"the sheet is damaged after row {self._line}: {exc!r}") from exc
        if not rows:
            self.close()
            return None
        offset = self._size if ended else self._file.tell()  # the last rows: the whole file
        return [record for line, values in rows if (record := self._record(line, values, offset))]

    def _next_line(self) -> int:
        self._line += 1
        if self._line > MAX_SHEET_ROWS:
            raise unreadable(f"the sheet has rows past Excel's last row ({MAX_SHEET_ROWS})")
        return self._line

    def _record(self, line: int, values: Sequence[object], offset: int) -> RawRecord | None:
        fields = row_fields(values, self._width)
        if not any(fields):
            return None  # an empty row: skipped and not counted, like a blank CSV line
        if self._width is None:
            self._width = len(fields)
        text = ",".join(fields)
        raw = text[:RAW_CHARS]
        reason = None
        if len(text) > self._max_record or max(map(len, fields)) > self._max_field:
            reason = Reason.FIELD_TOO_LONG
        elif "\x00" in text:
            reason = Reason.NUL_BYTE
        if reason is not None:
            return RawRecord(line, None, reason, raw.replace("\x00", "\\x00"), offset, line + 1)
        return RawRecord(line, fields, None, raw, offset, line + 1)

    def close(self) -> None:
        self._workbook.close()
