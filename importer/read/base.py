"""What CsvReader and JsonlReader share: the decoder, the position, the held text, the skip.

A :class:`RecordReader` turns a stream of byte blocks into records (``feed`` per block,
``finish`` at the end), each carrying the physical line where it starts and the byte offset just
after it. Between feeds it holds the text of the record in progress. Memory stays bounded by the
record cap plus one block whatever the input: once the record in progress passes the cap it is
skipped (:class:`Skip` keeps what its report needs, never its text) and reported
``field_too_long`` at its real end. A subclass cuts the records (``_consume``) and says what a
skipped record's text is reduced to (``_compress``); the per-record loops stay in the
subclasses, without a call per record through this class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Generic, TypeVar

from importer.core.models import Reason
from importer.read.records import RAW_CHARS, JsonRecord, RawRecord, Sniffed
from importer.read.text import SURROGATE, Decoder, display

R = TypeVar("R", RawRecord, JsonRecord)


class RecordReader(ABC, Generic[R]):
    """Records of type R from a stream of byte blocks, with the record and field caps."""

    _record_type: type[R]  # what the subclass yields, for the report of a skipped record

    def __init__(
        self,
        sniffed: Sniffed,
        *,
        max_field_chars: int = 65536,
        max_record_chars: int = 1048576,
        start_line: int = 1,
        start_offset: int = 0,
    ) -> None:
        self._decoder = Decoder(sniffed, at_start=start_offset == 0)
        self._max_field = max_field_chars
        self._max_record = max_record_chars
        self._line = start_line  # line where _buf starts
        self._offset = start_offset  # byte offset where _buf starts
        self._buf = ""  # text of the record in progress
        self._dirty = False  # whether _buf may hold undecodable bytes
        self._skip: Skip | None = None

    @property
    def buffered_chars(self) -> int:
        """Characters held between feeds (for tests of the memory bound)."""
        return len(self._buf)

    @property
    def mojibake(self) -> str | None:
        """The first UTF-8-read-as-Windows-1252 pattern met ("Ã§"), or None (see Decoder)."""
        return self._decoder.mojibake

    @property
    def encoding(self) -> str:
        return self._decoder.encoding

    def feed(self, data: bytes) -> list[R]:
        """The records completed by data, blank ones left out."""
        text, bom = self._decoder.decode(data)
        self._offset += bom
        return self._consume(text, final=False)

    def finish(self) -> list[R]:
        """The last record, which may end without a line break."""
        text, bom = self._decoder.decode(b"", final=True)
        self._offset += bom
        return self._consume(text, final=True)

    @abstractmethod
    def _consume(self, text: str, final: bool) -> list[R]:
        """The records completed by the held text + text (all of them when final)."""

    @abstractmethod
    def _compress(self, text: str) -> None:
        """Drop the skipped record's text, keeping in _buf only what cutting it still needs."""

    def _hold(self, tail: str, dirty: bool) -> None:
        """Keep the record in progress, or start skipping it once it passes the cap.

        dirty: whether tail may hold undecodable bytes.
        """
        if len(tail) <= self._max_record + 1:  # + 1: a CR waiting for its LF (of a CRLF)
            self._buf = tail
        else:
            self._skip = Skip(self._line, "")
            self._compress(tail)
        self._dirty = dirty and SURROGATE.search(self._buf) is not None

    def _end_skip(self, passed: str) -> Skip:
        """Stop skipping: the skipped record's last text passed, the offset moved past it."""
        skip = self._skip
        assert skip is not None  # only called while skipping
        skip.passing(passed, self._decoder.count_bytes(passed))
        self._offset += skip.bytes
        self._skip = None
        return skip

    def _too_long(self, skip: Skip) -> R:
        """The report of a skipped record (call once _line is the line after it)."""
        raw = display(skip.head)
        return self._record_type(
            skip.line, None, Reason.FIELD_TOO_LONG, raw, self._offset, self._line
        )


@dataclass(slots=True)
class Skip:
    """A record over the cap being skipped: what its report needs, never its text."""

    line: int
    head: str  # the record's first characters, for its report
    lines: int = 0  # line breaks passed so far
    bytes: int = 0  # bytes passed so far

    def passing(self, text: str, byte_count: int) -> None:
        if len(self.head) < RAW_CHARS + 2:
            self.head += text[: RAW_CHARS + 2 - len(self.head)]
        self.lines += line_breaks(text)
        self.bytes += byte_count


def line_breaks(text: str) -> int:
    """The line breaks in text as csv counts them (CRLF, LF or CR)."""
    return text.count("\n") + text.count("\r") - text.count("\r\n")
