"""What the readers yield and share: a CSV record, a JSONL object, the sniffed format, the
rejection of a file, and the cap on a record's text kept for the error report."""

from __future__ import annotations

from dataclasses import dataclass

from importer.core.errors import FileRejectedError
from importer.core.models import Reason

RAW_CHARS = 200  # chars of a record's text kept for the error report


class FileRejected(FileRejectedError):  # noqa: N818 - the name the pipeline imports
    """The file cannot be imported (``reason`` says why, ``detail`` for humans)."""


@dataclass(frozen=True, slots=True)
class RawRecord:
    line: int  # 1-based physical line where the record starts
    fields: list[str] | None  # decoded, not trimmed; None when reason is set
    reason: Reason | None  # INVALID_ENCODING, NUL_BYTE or FIELD_TOO_LONG
    raw: str  # the record's text for the error report, at most RAW_CHARS
    end_offset: int  # byte offset in the reader's input (BOM included) just after the record
    end_line: int  # the line just after the record: where a reader resuming at end_offset starts


@dataclass(frozen=True, slots=True)
class JsonRecord:
    line: int
    values: dict[str, str] | None  # None when reason is set
    reason: Reason | None  # MALFORMED_JSON, NOT_AN_OBJECT, INVALID_ENCODING, NUL_BYTE, ...
    raw: str
    end_offset: int
    end_line: int


@dataclass(frozen=True, slots=True)
class Sniffed:
    encoding: str  # a Python codec name: "utf-8", "utf-16-le", "cp1252", ...
    delimiter: str  # one of "," ";" "\t" "|" when detected
    bom_length: int  # bytes of BOM to skip at the start of the stream
