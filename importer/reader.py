"""Streaming readers of import files: bytes in, records out (pure, no I/O).

``sniff`` picks the encoding and the delimiter from the first bytes; ``CsvReader`` and
``JsonlReader`` turn a stream of byte blocks into records that carry the physical line where
they start and the byte offset just after them; ``GzipInflater`` decompresses with a cap.

CSV records are cut exactly as Python's csv module cuts them (quotes open a field only at its
start, "" inside quotes, CRLF/LF/CR line ends), then split with str.split when they hold no
quote and by csv otherwise. Memory stays bounded by the record cap plus one block whatever the
input: a record over the cap is skipped by keeping only the parser's state (as a prefix of at
most two characters), never its text, and it is reported ``field_too_long`` at its real end.
Undecodable bytes are decoded as lone surrogates (U+DC00 + byte), so a bad record never stops
the stream: any record holding one is reported ``invalid_encoding``, and U+FFFD never appears.
"""

from __future__ import annotations

import codecs
import csv
import json
import re
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import charset_normalizer
import orjson

from importer.exceptions import FileRejectedError
from importer.models import Reason

RAW_CHARS = 200  # chars of a record's text kept for the error report
DELIMITERS = (",", ";", "\t", "|")  # the sniffer's candidates, in order of preference on a tie
PIECE_BYTES = 256 * 1024  # largest piece GzipInflater.feed_iter yields
RATIO_AFTER_BYTES = 8 * 1024 * 1024  # GzipInflater's ratio guard starts past this much output
_CSV_FIELD_LIMIT = 2**31 - 1  # csv's own cap, moved out of the way: ours is enforced by hand
_ESCAPE = "importer.bytes"  # decoding error handler: undecodable byte b -> U+DC00 + b

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE, whose BOM is its prefix
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
# The codecs accepted (SPEC "Input"), with the bytes one ASCII character takes in each.
_ASCII_WIDTH = {
    "utf-8": 1,
    "cp1252": 1,
    "iso8859-1": 1,
    "iso8859-15": 1,
    "ascii": 1,
    "utf-16-le": 2,
    "utf-16-be": 2,
    "utf-32-le": 4,
    "utf-32-be": 4,
}
# Codecs named without a byte order or BOM use, as the file is when it has no BOM.
_UNMARKED = {"utf-8-sig": "utf-8", "utf-16": "utf-16-le", "utf-32": "utf-32-le"}
_SINGLE_BYTE = frozenset({"cp1252", "iso8859-1", "iso8859-15", "ascii"})
# charset_normalizer's names of Latin-script single-byte code pages. On short Portuguese text it
# often prefers cp1250 or a DOS page over cp1252; for this product's files (Excel, pt-BR) any of
# them means "Windows-1252", while Cyrillic, Greek, Arabic or CJK guesses mean "unsupported".
_LATIN_CODE_PAGES = frozenset(
    {
        *("ascii", "latin_1", "cp1250", "cp1252", "cp1254", "cp1257", "cp1258"),
        *("iso8859_2", "iso8859_3", "iso8859_4", "iso8859_9", "iso8859_10", "iso8859_13"),
        *("iso8859_14", "iso8859_15", "iso8859_16", "hp_roman8"),
        *("cp437", "cp775", "cp850", "cp852", "cp857", "cp858", "cp860", "cp861", "cp863", "cp865"),
        *("mac_roman", "mac_latin2", "mac_iceland", "mac_turkish"),
    }
)

_SURROGATE = re.compile("[\ud800-\udfff]")
_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")  # an undecodable byte or a NUL
_QUOTED_SPAN = re.compile(r'"[^"]*"')
_SURROGATE_RUN = re.compile("[\ud800-\udfff]+")  # one corrupt sequence: a run of escaped bytes
_TWO_BYTE_CHAR = re.compile("[\x80-\u07ff]")  # decoded from a valid two-byte UTF-8 sequence
_LONG_CHAR = re.compile("[\u0800-\ud7ff\ue000-\U0010ffff]")  # from three or four bytes
# Corrupt sequences allowed per valid multi-byte one before a sample is taken for a code page:
# real Windows-1252 pt-BR text has hundreds of accented letters per accidental valid pair.
_CORRUPT_PER_VALID = 16
_LONG_SEQUENCE_WEIGHT = 4  # a valid 3- or 4-byte sequence is far stronger evidence than 2 bytes
# UTF-8 sequences that read as Windows-1252 show the usual mojibake: Ã, Â or Å + a byte 80-BF
# ("Ã§", "Ã£", "Ã©", "Âº"), â + two ("â€™", "â€œ", the euro sign), ð + three (emoji: "ðŸ"...).
# Real cp1252 text almost never holds them. Found by classing each byte (bytes.translate) and
# looking for the class sequences with bytes.find: both C loops, some 30 times faster than re.
_LEAD2, _LEAD3, _LEAD4, _CONT = b"L", b"E", b"F", b"c"
_MOJIBAKE_CLASSES = bytes(
    (
        _LEAD2[0] if byte in (0xC2, 0xC3, 0xC5)
        else _LEAD3[0] if byte == 0xE2
        else _LEAD4[0] if byte == 0xF0
        else _CONT[0] if 0x80 <= byte <= 0xBF
        else ord(".")
    )
    for byte in range(256)
)  # fmt: skip
_MOJIBAKE = (_LEAD2 + _CONT, _LEAD3 + _CONT * 2, _LEAD4 + _CONT * 3)
_ACCENTED_LETTER = re.compile(r"[^\W\d_a-zA-Z]")
_ASCII_LETTER = re.compile("[a-zA-Z]")
_MAX_ACCENTED_SHARE = 0.5  # accented letters per ASCII letter: pt-BR ~0.05, Cyrillic as 1252 ~10
_QUOTED_OPEN = re.compile(r'"[^"]*+(?:""[^"]*+)*+')  # a quoted field up to its closing quote


class FileRejected(FileRejectedError):  # noqa: N818 - the name the pipeline imports
    """The file cannot be imported (``reason`` says why, ``detail`` for humans)."""


@dataclass(frozen=True, slots=True)
class Sniffed:
    encoding: str  # a Python codec name: "utf-8", "utf-16-le", "cp1252", ...
    delimiter: str  # one of "," ";" "\t" "|" when detected
    bom_length: int  # bytes of BOM to skip at the start of the stream


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


# --- decoding -------------------------------------------------------------------------------


class _Tally(threading.local):
    """Undecodable sequences met so far in this thread, so that a decoder knows whether a
    block had any without scanning its text."""

    decode_errors = 0


_TALLY = _Tally()


def _escape_bytes(exc: UnicodeError) -> tuple[str, int]:
    """Decode each undecodable byte b as U+DC00+b.

    Like "surrogateescape", but for bytes under 0x80 too (UTF-16's unpaired surrogates).
    """
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    _TALLY.decode_errors += 1
    bad = exc.object[exc.start : exc.end]
    return "".join([chr(0xDC00 + byte) for byte in bad]), exc.end


codecs.register_error(_ESCAPE, _escape_bytes)


def _canonical(encoding: str) -> str:
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        raise FileRejected(Reason.UNSUPPORTED_ENCODING, f"unknown encoding {encoding!r}") from None


def _byte_counter(encoding: str) -> Callable[[str], int]:
    """How many bytes of the input a decoded text came from (escaped bytes count one)."""
    if encoding in _SINGLE_BYTE:
        return len
    if encoding == "utf-8":
        return lambda text: len(text.encode("utf-8", "surrogateescape"))
    extra = _ASCII_WIDTH[encoding] - 1  # an escaped byte re-encodes as a whole code unit

    def count(text: str) -> int:
        try:
            return len(text.encode(encoding))
        except UnicodeEncodeError:  # escaped bytes
            escaped = len(_SURROGATE.findall(text))
            return len(text.encode(encoding, "surrogatepass")) - escaped * extra

    return count


class _Decoder:
    """Bytes to text for one stream: drops the BOM, decodes incrementally, counts bytes back.

    A single-byte code page also watches the bytes for UTF-8 sequences typical of UTF-8 text
    read as Windows-1252 ("Ã§", "â€™", "ðŸ" + 2): ``mojibake`` is the first found, as decoded.
    """

    __slots__ = (
        *("_bom_left", "_decoder", "_watch", "ascii_width"),
        *("byte_len", "encoding", "escaped", "mojibake"),
    )

    def __init__(self, sniffed: Sniffed, *, at_start: bool) -> None:
        encoding = _canonical(sniffed.encoding)
        width = _ASCII_WIDTH.get(encoding)
        if width is None:
            raise FileRejected(Reason.UNSUPPORTED_ENCODING, f"encoding {encoding!r} not supported")
        self._decoder = codecs.getincrementaldecoder(encoding)(_ESCAPE)
        self._bom_left = sniffed.bom_length if at_start else 0
        self.ascii_width = width
        self.byte_len = _byte_counter(encoding)
        self.escaped = False  # whether the last block decoded had undecodable bytes
        self.encoding = encoding  # the canonical codec name
        self._watch = encoding in _SINGLE_BYTE and encoding != "ascii"
        self.mojibake: str | None = None

    def decode(self, data: bytes, *, final: bool = False) -> tuple[str, int]:
        """The text of data and the number of BOM bytes dropped from its start."""
        bom = min(self._bom_left, len(data))
        self._bom_left -= bom
        errors_before = _TALLY.decode_errors
        text = self._decoder.decode(data[bom:] if bom else data, final)
        self.escaped = _TALLY.decode_errors != errors_before
        if self._watch:
            self._look_for_mojibake(data)
        return text, bom

    def _look_for_mojibake(self, data: bytes) -> None:
        classes = data.translate(_MOJIBAKE_CLASSES)
        found = [(at, len(seq)) for seq in _MOJIBAKE if (at := classes.find(seq)) >= 0]
        if found:
            at, length = min(found)
            self.mojibake = data[at : at + length].decode(self.encoding, "backslashreplace")
            self._watch = False  # once is enough: the warning is about the file

    def count_bytes(self, text: str) -> int:
        return len(text) * self.ascii_width if text.isascii() else self.byte_len(text)


def _escaped(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()) & 0xFF:02x}"


def _display(text: str) -> str:
    """A record's text as the report shows it: no line break, cut, bad bytes as \\xNN."""
    return _BAD_CHAR.sub(_escaped, text[: RAW_CHARS + 2].rstrip("\r\n"))[:RAW_CHARS]


def _char_problem(text: str) -> Reason | None:
    if _SURROGATE.search(text) is not None:
        return Reason.INVALID_ENCODING
    if "\x00" in text:
        return Reason.NUL_BYTE
    return None


def _line_breaks(text: str) -> int:
    return text.count("\n") + text.count("\r") - text.count("\r\n")


# --- sniffing -------------------------------------------------------------------------------


def sniff(sample: bytes, *, encoding: str | None = None, delimiter: str | None = None) -> Sniffed:
    """Detect the encoding and the delimiter from the first bytes (e.g. 64 KiB) unless given.

    Encoding: a UTF-8/UTF-16/UTF-32 BOM; else UTF-8 if the sample is UTF-8 (a sequence cut at
    the end is fine, and so are corrupt sequences unless they outnumber the valid multi-byte
    ones many times over: see ``prefers_utf8``); else cp1252 if charset_normalizer's guess is
    a Latin single-byte code page or the sample reads as Windows-1252 text with few accented
    letters; else UNSUPPORTED_ENCODING. A given name must be one of the supported codecs; a
    BOM overrides it.
    Delimiter: the one of DELIMITERS occurring most outside quotes in the first non-blank
    record, "," when none does. An empty or blank sample is EMPTY_FILE.
    """
    if encoding is None:
        codec, bom_length = _detect_encoding(sample)
    else:
        codec, bom_length = _given_encoding(sample, encoding)
    text = codecs.getincrementaldecoder(codec)(_ESCAPE).decode(sample[bom_length:])
    if not text.strip():
        raise FileRejected(Reason.EMPTY_FILE, "the file holds no data")
    if delimiter is None:
        return Sniffed(codec, _detect_delimiter(text), bom_length)
    _check_delimiter(delimiter)
    return Sniffed(codec, delimiter, bom_length)


def _bom(sample: bytes) -> tuple[str | None, int]:
    for bom, codec in _BOMS:
        if sample.startswith(bom):
            return codec, len(bom)
    return None, 0


def _detect_encoding(sample: bytes) -> tuple[str, int]:
    codec, bom_length = _bom(sample)
    if codec is not None:
        return codec, bom_length
    if prefers_utf8(utf8_evidence(sample)):
        return "utf-8", 0
    best = charset_normalizer.from_bytes(sample).best()
    if best is not None and not _LATIN_CODE_PAGES.isdisjoint(best.could_be_from_charset):
        return "cp1252", 0
    if _reads_as_western(sample):
        return "cp1252", 0
    guess = best.encoding if best is not None else "nothing"
    raise FileRejected(
        Reason.UNSUPPORTED_ENCODING,
        f"not UTF-8, UTF-16 with a BOM or Windows-1252 (detected: {guess})",
    )


@dataclass(frozen=True, slots=True)
class Utf8Evidence:
    """What strict UTF-8 decoding found in a sample: the valid multi-byte sequences (short:
    two bytes; long: three or four) and the corrupt sequences (runs of undecodable bytes)."""

    short: int
    long: int
    corrupt: int


def utf8_evidence(sample: bytes) -> Utf8Evidence:
    """Count the sample's valid multi-byte UTF-8 sequences and its corrupt sequences.

    The sample is decoded as a stream that goes on: a sequence cut by the sample's end is
    neither valid nor corrupt (the sample is a file's first 64 KiB). Each run of undecodable
    bytes counts once, whatever its length (a lone byte, a truncated or overlong sequence).
    """
    text = codecs.getincrementaldecoder("utf-8")(_ESCAPE).decode(sample)
    if text.isascii():
        return Utf8Evidence(0, 0, 0)
    return Utf8Evidence(
        short=len(_TWO_BYTE_CHAR.findall(text)),
        long=len(_LONG_CHAR.findall(text)),
        corrupt=len(_SURROGATE_RUN.findall(text)),
    )


def prefers_utf8(evidence: Utf8Evidence) -> bool:
    """Whether a sample with this evidence is UTF-8 (else: a single-byte code page).

    No corrupt sequence (pure ASCII included): UTF-8. Windows-1252 text almost never forms a
    valid multi-byte sequence (an accented capital followed by a symbol at best, and three or
    four bytes in a row essentially never), while its accented letters are each a corrupt
    sequence. So valid sequences are evidence of a (damaged) UTF-8 file unless the corrupt
    ones outnumber them many times over: a few bad records in a small file never flip it.
    """
    if evidence.corrupt == 0:
        return True
    weight = evidence.short + _LONG_SEQUENCE_WEIGHT * evidence.long
    return evidence.corrupt <= _CORRUPT_PER_VALID * weight


def _reads_as_western(sample: bytes) -> bool:
    """Whether the sample reads as Windows-1252 text with accents here and there.

    charset_normalizer often takes a short Portuguese sample ("João;São Paulo") for Big5 or
    Shift-JIS; text of another script read as Windows-1252 is nearly all accented letters.
    """
    try:
        text = sample.decode("cp1252")
    except UnicodeDecodeError:
        return False
    accented = len(_ACCENTED_LETTER.findall(text))
    return accented <= len(_ASCII_LETTER.findall(text)) * _MAX_ACCENTED_SHARE


def _given_encoding(sample: bytes, encoding: str) -> tuple[str, int]:
    """The given codec and no BOM, unless the sample starts with a BOM, which wins (as in the
    WHATWG Encoding standard: a layout saying cp1252 must not garble an Excel UTF-8 export)."""
    codec = _canonical(encoding)
    bom_codec, bom_length = _bom(sample)
    if bom_codec is not None:
        return bom_codec, bom_length
    codec = _UNMARKED.get(codec, codec)
    if codec not in _ASCII_WIDTH:
        raise FileRejected(Reason.UNSUPPORTED_ENCODING, f"encoding {encoding!r} not supported")
    return codec, 0


def _first_record(text: str) -> str:
    """The first non-blank record of text, its quoted line breaks included."""
    lines: list[str] = []
    quotes = 0
    for line in text.splitlines():
        if lines or line.strip():
            lines.append(line)
            quotes += line.count('"')
            if quotes % 2 == 0:
                break
    return "\n".join(lines)


def _detect_delimiter(text: str) -> str:
    unquoted = _QUOTED_SPAN.sub("", _first_record(text))
    counts = [unquoted.count(delimiter) for delimiter in DELIMITERS]
    most = max(counts)
    return DELIMITERS[counts.index(most)] if most else ","


def _check_delimiter(delimiter: str) -> None:
    if len(delimiter) != 1 or delimiter in '"\r\n':
        raise ValueError(f"a delimiter is one character, not a quote or line break: {delimiter!r}")


# --- CSV ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Skip:
    """A record over the cap being skipped: what its report needs, never its text."""

    line: int
    head: str  # the record's first characters, for its report
    lines: int = 0  # line breaks passed so far
    bytes: int = 0  # bytes passed so far

    def passing(self, text: str, byte_count: int) -> None:
        if len(self.head) < RAW_CHARS + 2:
            self.head += text[: RAW_CHARS + 2 - len(self.head)]
        self.lines += _line_breaks(text)
        self.bytes += byte_count


def _csv_patterns(delimiter: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A complete record, and the complete fields of a partial one, as csv's parser sees them.

    A quote opens a quoted field only at the field's start; inside, "" is a quote; after the
    closing quote the field goes on unquoted (quotes are then plain characters). Possessive
    quantifiers never backtrack, so a failed match costs one pass over the text.
    """
    d = re.escape(delimiter)
    field = rf'(?:"[^"]*+(?:""[^"]*+)*+"[^{d}\r\n]*+|[^{d}"\r\n][^{d}\r\n]*+)?+'
    record = re.compile(rf"{field}(?:{d}{field})*+(?:\r\n|\n|\r)")
    return record, re.compile(rf"(?:{field}{d})*+")


def _match_end(pattern: re.Pattern[str], text: str) -> int:
    """Where pattern's match at the start of text ends (patterns here match at least "")."""
    found = pattern.match(text)
    return found.end() if found is not None else 0


def _records_stop(buf: str, final: bool) -> int:
    """Where the complete records of buf stop at the latest: after its last line break.

    A CR at the very end does not count until the next block says whether an LF follows.
    """
    end = len(buf) if final or not buf.endswith("\r") else len(buf) - 1
    return max(buf.rfind("\n", 0, end), buf.rfind("\r", 0, end)) + 1


def _group_by_parity(lines: list[str]) -> tuple[list[str], list[str]]:
    """Join the lines of records spanning lines (odd quote count so far); also return the
    lines of a record still open at the end."""
    texts: list[str] = []
    append = texts.append
    held: list[str] = []
    quotes = 0
    for line in lines:
        if held:
            held.append(line)
            quotes += line.count('"')
            if not quotes & 1:
                append("".join(held))
                held = []
        elif '"' not in line or not (quotes := line.count('"')) & 1:
            append(line)
        else:
            held = [line]
    return texts, held


def _is_blank(fields: list[str]) -> bool:
    return not "".join(fields).strip()


class CsvReader:
    """RFC 4180 records from a stream of byte blocks (see the module docstring)."""

    def __init__(
        self,
        sniffed: Sniffed,
        *,
        max_field_chars: int = 65536,
        max_record_chars: int = 1048576,
        start_line: int = 1,
        start_offset: int = 0,
    ) -> None:
        _check_delimiter(sniffed.delimiter)
        if csv.field_size_limit() < _CSV_FIELD_LIMIT:
            csv.field_size_limit(_CSV_FIELD_LIMIT)
        self._decoder = _Decoder(sniffed, at_start=start_offset == 0)
        self._delimiter = sniffed.delimiter
        self._record, self._complete_fields = _csv_patterns(sniffed.delimiter)
        self._filler = "x" if sniffed.delimiter != "x" else "y"  # any char of an unquoted field
        self._max_field = max_field_chars
        self._max_record = max_record_chars
        self._check_over = min(max_field_chars, max_record_chars)
        self._line = start_line  # line where _buf starts
        self._offset = start_offset  # byte offset where _buf starts
        self._buf = ""  # text of the record in progress (after a skip: a state prefix first)
        self._dirty = False  # whether _buf may hold undecodable bytes
        self._prefix = 0  # length of that state prefix
        self._skip: _Skip | None = None

    @property
    def buffered_chars(self) -> int:
        """Characters held between feeds (for tests of the memory bound)."""
        return len(self._buf)

    @property
    def mojibake(self) -> str | None:
        """The first UTF-8-read-as-Windows-1252 pattern met ("Ã§"), or None (see _Decoder)."""
        return self._decoder.mojibake

    @property
    def encoding(self) -> str:
        return self._decoder.encoding

    def feed(self, data: bytes) -> list[RawRecord]:
        """The records completed by data, blank ones left out."""
        text, bom = self._decoder.decode(data)
        self._offset += bom
        return self._consume(text, final=False)

    def finish(self) -> list[RawRecord]:
        """The last record, which may end without a line break."""
        text, bom = self._decoder.decode(b"", final=True)
        self._offset += bom
        return self._consume(text, final=True)

    def _consume(self, text: str, final: bool) -> list[RawRecord]:
        buf = self._buf + text if self._buf else text
        dirty = self._dirty or self._decoder.escaped
        out: list[RawRecord] = []
        pos = 0
        if self._skip is not None:
            pos = self._skip_to_end(buf, final, out)
            if pos < 0:
                return out
        texts, quoted_fields, end = self._records(buf, pos, final)
        suspect = dirty or buf.find("\x00", pos) >= 0
        out += self._emit(texts, iter(quoted_fields), suspect=suspect)
        if final and end < len(buf):  # the last record, without a line break
            last = [buf[end:]]
            out += self._emit(last, iter(self._parse_quoted(last)), suspect=suspect, ends="")
        else:
            self._hold(buf[end:])
            self._dirty = dirty and _SURROGATE.search(self._buf) is not None
        return out

    def _records(self, buf: str, pos: int, final: bool) -> tuple[list[str], list[list[str]], int]:
        """The complete records of buf from pos, the fields of those with quotes, and where
        they stop; what follows is a single record in progress (at the end: without a line break).

        Lines are grouped by quote parity and csv parses the groups with quotes; this is exact
        for well-formed files, and csv's count of rows proves it. Otherwise (a quote inside an
        unquoted field, or a line break str.splitlines knows and csv does not) the grammar is
        matched record by record, which is exact always and about five times slower.
        """
        cut = self._cut_by_parity(buf, pos, final)
        if cut is not None:
            texts, end = cut
            quoted_fields = self._proven_fields(texts)
            if quoted_fields is not None and self._incomplete(buf, end, final):
                return texts, quoted_fields, end
        texts, end = self._match_records(buf, pos, final)
        return texts, self._parse_quoted(texts), end

    def _cut_by_parity(self, buf: str, pos: int, final: bool) -> tuple[list[str], int] | None:
        stop = max(pos, _records_stop(buf, final))
        region = buf[pos:stop]
        lines = region.splitlines(keepends=True)
        if len(lines) != _line_breaks(region):
            return None  # \v \f \x1c-\x1e \x85 \u2028 \u2029 are not line breaks to csv
        if '"' in region:
            lines, held = _group_by_parity(lines)
            stop -= sum(map(len, held))
        return lines, stop

    def _parse_quoted(self, texts: list[str]) -> list[list[str]]:
        """csv's fields of the texts with quotes."""
        return list(csv.reader([text for text in texts if '"' in text], delimiter=self._delimiter))

    def _proven_fields(self, texts: list[str]) -> list[list[str]] | None:
        """csv's fields of the texts with quotes, or None unless each text is one record.

        A text holding more than one record makes csv raise; a text ending inside quotes makes
        it swallow the next one, the last swallowing the blank sentinel: fewer rows than texts.
        """
        quoted = [text for text in texts if '"' in text]
        try:
            rows = list(csv.reader([*quoted, "\n"], delimiter=self._delimiter))
        except csv.Error:
            return None
        return rows[:-1] if len(rows) == len(quoted) + 1 else None

    def _incomplete(self, buf: str, end: int, final: bool) -> bool:
        """Whether buf[end:] holds no complete record (the proof for what parity holds back)."""
        found = self._record.match(buf, end)
        return found is None or (not final and found.end() == len(buf) and buf.endswith("\r"))

    def _match_records(self, buf: str, pos: int, final: bool) -> tuple[list[str], int]:
        texts: list[str] = []
        match = self._record.match
        size = len(buf)
        while (found := match(buf, pos)) is not None:
            end = found.end()
            if end == size and not final and buf[end - 1] == "\r":
                break  # an LF may follow in the next block
            texts.append(buf[pos:end])
            pos = end
        return texts, pos

    def _emit(
        self, texts: list[str], quoted: Iterator[list[str]], *, suspect: bool, ends: str = "\r\n"
    ) -> list[RawRecord]:
        # The per-record hot loop, kept in one piece on purpose: a function call per record for
        # the line count, the byte count or the checks would cost a good share of the speed.
        # A record without quotes is cut with str.split, which gives what csv gives at a fifth
        # of the cost; the fields of those with quotes come from csv, parsed in one call.
        out: list[RawRecord] = []
        append = out.append
        delimiter = self._delimiter
        line, offset = self._line, self._offset
        width, byte_len = self._decoder.ascii_width, self._decoder.byte_len
        check_over = self._check_over
        for text in texts:
            start = line
            content = text.rstrip(ends)  # without its line break
            if '"' in text:
                fields = next(quoted)
                line += _line_breaks(text) if "\n" in content or "\r" in content else 1
            else:
                fields = content.split(delimiter)
                line += 1
            offset += len(text) * width if text.isascii() else byte_len(text)
            if suspect or len(text) > check_over:  # (a long blank record is too long too)
                reason = self._problem(content, fields)
                if reason is not None:
                    append(RawRecord(start, None, reason, _display(content), offset, line))
                    continue
            if (not fields or not fields[0] or fields[0][0].isspace()) and _is_blank(fields):
                continue
            raw = content if len(content) <= RAW_CHARS else content[:RAW_CHARS]
            append(RawRecord(start, fields, None, raw, offset, line))
        self._line, self._offset = line, offset
        return out

    def _problem(self, content: str, fields: list[str]) -> Reason | None:
        # A record over the cap is field_too_long whatever it holds: a skipped one is never seen.
        if len(content) > self._max_record:
            return Reason.FIELD_TOO_LONG
        reason = _char_problem(content)
        if reason is None and max(map(len, fields), default=0) > self._max_field:
            return Reason.FIELD_TOO_LONG
        return reason

    def _hold(self, tail: str) -> None:
        """Keep the record in progress, or start skipping it once it passes the cap."""
        if len(tail) <= self._max_record + 1:  # + 1: a CR waiting for its LF
            self._buf = tail
            return
        self._skip = _Skip(self._line, "")
        self._compress(tail)

    def _compress(self, text: str) -> None:
        """Drop the skipped record's text, keeping csv's state as a short prefix."""
        skip = self._skip
        assert skip is not None  # only called while skipping
        cut = len(text) - 1 if text.endswith("\r") else len(text)  # keep a CR for its LF
        passed = text[self._prefix : cut]
        skip.passing(passed, self._decoder.count_bytes(passed))
        prefix = self._state_prefix(text[:cut])
        self._buf = prefix + text[cut:]
        self._prefix = len(prefix)

    def _state_prefix(self, partial: str) -> str:
        """A text leaving csv's parser in the state it is in after partial (a record's start)."""
        last = partial[_match_end(self._complete_fields, partial) :]
        if not last:
            return ""  # at a field's start
        if last[0] != '"':
            return self._filler  # in an unquoted field
        stop = _match_end(_QUOTED_OPEN, last)
        if stop == len(last):
            return '"'  # in a quoted field
        if stop == len(last) - 1:
            return '""'  # just after a quote in a quoted field: closing or first of ""
        return self._filler  # past the closing quote: the field goes on unquoted

    def _skip_to_end(self, buf: str, final: bool, out: list[RawRecord]) -> int:
        """Where the skipped record ends in buf (its report appended), or -1 if not in buf."""
        found = self._record.match(buf)
        if found is not None and (final or found.end() < len(buf) or not buf.endswith("\r")):
            end = found.end()
        elif final:
            end = len(buf)
        else:
            self._compress(buf)
            return -1
        skip = self._skip
        assert skip is not None  # only called while skipping
        passed = buf[self._prefix : end]
        skip.passing(passed, self._decoder.count_bytes(passed))
        self._offset += skip.bytes
        self._line = skip.line + skip.lines
        raw = _display(skip.head)
        out.append(RawRecord(skip.line, None, Reason.FIELD_TOO_LONG, raw, self._offset, self._line))
        self._skip, self._prefix, self._buf = None, 0, ""
        return end


# --- JSON Lines -----------------------------------------------------------------------------


def _json_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)  # floats are replaced by their exact text (see _exact_numbers)
    return orjson.dumps(value).decode()


def _exact_numbers(text: str, parsed: dict[str, Any]) -> dict[str, str]:
    """The JSON text of the top-level numbers orjson turned into floats (1.50, 1e5, 2**70)."""
    try:
        exact = json.loads(text, parse_float=str, parse_int=str)
    except ValueError:
        return {}
    return {key: exact[key] for key, value in parsed.items() if isinstance(value, float)}


def _json_values(text: str) -> tuple[dict[str, str] | None, Reason | None]:
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None, Reason.MALFORMED_JSON
    if not isinstance(parsed, dict):
        return None, Reason.NOT_AN_OBJECT
    kinds = set(map(type, parsed.values()))
    if kinds <= {str}:
        return parsed, None  # the usual case, checked at C speed
    values = {key: _json_text(value) for key, value in parsed.items()}
    if float in kinds:
        values.update(_exact_numbers(text, parsed))
    return values, None


class JsonlReader:
    """One JSON object per line, from a stream of byte blocks; same limits as CsvReader."""

    def __init__(
        self,
        sniffed: Sniffed,
        *,
        max_field_chars: int = 65536,
        max_record_chars: int = 1048576,
        start_line: int = 1,
        start_offset: int = 0,
    ) -> None:
        self._decoder = _Decoder(sniffed, at_start=start_offset == 0)
        self._max_field = max_field_chars
        self._max_record = max_record_chars
        self._line = start_line
        self._offset = start_offset
        self._buf = ""
        self._dirty = False  # whether _buf may hold undecodable bytes
        self._skip: _Skip | None = None

    @property
    def buffered_chars(self) -> int:
        """Characters held between feeds (for tests of the memory bound)."""
        return len(self._buf)

    @property
    def mojibake(self) -> str | None:
        """The first UTF-8-read-as-Windows-1252 pattern met ("Ã§"), or None (see _Decoder)."""
        return self._decoder.mojibake

    @property
    def encoding(self) -> str:
        return self._decoder.encoding

    def feed(self, data: bytes) -> list[JsonRecord]:
        """The records completed by data, blank lines left out."""
        text, bom = self._decoder.decode(data)
        self._offset += bom
        return self._consume(text, final=False)

    def finish(self) -> list[JsonRecord]:
        """The last record, which may end without a line break."""
        text, bom = self._decoder.decode(b"", final=True)
        self._offset += bom
        return self._consume(text, final=True)

    def _consume(self, text: str, final: bool) -> list[JsonRecord]:
        buf = self._buf + text if self._buf else text
        out: list[JsonRecord] = []
        pos = self._skip_to_end(buf, final, out) if self._skip is not None else 0
        if pos < 0:
            return out
        stop = len(buf) if final else max(pos, buf.rfind("\n") + 1)
        dirty = self._dirty or self._decoder.escaped
        suspect = dirty or buf.find("\x00", pos, stop) >= 0
        lines = buf[pos:stop].split("\n")
        last = lines.pop()  # "" unless the file ends without a line break
        for line in lines:
            self._add(line, 1, suspect, out)
        if last:
            self._add(last, 0, suspect, out)
        self._hold(buf[stop:])
        self._dirty = dirty and _SURROGATE.search(self._buf) is not None
        return out

    def _add(self, text: str, breaks: int, suspect: bool, out: list[JsonRecord]) -> None:
        line = self._line
        self._line += 1
        self._offset += self._decoder.count_bytes(text) + breaks * self._decoder.ascii_width
        if len(text) - text.endswith("\r") > self._max_record:  # as when skipped: never seen
            out.append(
                JsonRecord(
                    line, None, Reason.FIELD_TOO_LONG, _display(text), self._offset, self._line
                )
            )
        elif text.strip():
            out.append(self._record(text, line, suspect))

    def _record(self, text: str, line: int, suspect: bool) -> JsonRecord:
        values, reason = None, _char_problem(text) if suspect else None
        if reason is None:
            values, reason = _json_values(text)
        if values is not None:
            reason = self._values_problem(text, values)
        if reason is not None:
            return JsonRecord(line, None, reason, _display(text), self._offset, self._line)
        raw = text[: RAW_CHARS + 1].rstrip("\r")[:RAW_CHARS]
        return JsonRecord(line, values, None, raw, self._offset, self._line)

    def _values_problem(self, text: str, values: dict[str, str]) -> Reason | None:
        if "\\u0000" in text and any("\x00" in k or "\x00" in v for k, v in values.items()):
            return Reason.NUL_BYTE  # from a \u0000 escape
        if max(map(len, values.values()), default=0) > self._max_field:
            return Reason.FIELD_TOO_LONG
        return None

    def _hold(self, tail: str) -> None:
        if len(tail) <= self._max_record + 1:  # + 1: the CR of a CRLF
            self._buf = tail
            return
        self._skip = _Skip(self._line, "")
        self._skip.passing(tail, self._decoder.count_bytes(tail))
        self._buf = ""

    def _skip_to_end(self, buf: str, final: bool, out: list[JsonRecord]) -> int:
        """Where the skipped line ends in buf (its report appended), or -1 if not in buf."""
        skip = self._skip
        assert skip is not None  # only called while skipping
        newline = buf.find("\n")
        if newline < 0 and not final:
            skip.passing(buf, self._decoder.count_bytes(buf))
            self._buf = ""
            return -1
        end = len(buf) if newline < 0 else newline + 1
        skip.passing(buf[:end], self._decoder.count_bytes(buf[:end]))
        self._offset += skip.bytes
        self._line += 1
        raw = _display(skip.head)
        out.append(
            JsonRecord(skip.line, None, Reason.FIELD_TOO_LONG, raw, self._offset, self._line)
        )
        self._skip = None
        return end


# --- gzip -----------------------------------------------------------------------------------


class GzipInflater:
    """Incremental gzip decompression with a cap on the total decompressed size (bomb guard).

    Concatenated members are read one after another; zero padding after a member is ignored,
    as gzip does. ``feed_iter`` yields pieces of at most ``piece_bytes``, so memory stays at one
    piece whatever the ratio; ``feed`` joins them, so one 256 KiB block of zeros (~256 MB out)
    is held whole. The output passes the cap by at most one byte before the rejection. Damaged
    or truncated data is SOURCE_UNREADABLE.

    With ``max_ratio``, once the stream has produced more than ``ratio_after_bytes`` the output
    may not pass ``max_ratio`` times the compressed bytes consumed (counted over all members,
    so a bomb of many small members is caught too): a bomb is DECOMPRESSED_TOO_LARGE after a
    few MiB of work, not at the absolute cap. Small files are never held to the ratio.
    """

    def __init__(
        self,
        max_output_bytes: int,
        *,
        piece_bytes: int = PIECE_BYTES,
        max_ratio: int | None = None,
        ratio_after_bytes: int = RATIO_AFTER_BYTES,
    ) -> None:
        self._cap = max_output_bytes
        self._piece = piece_bytes
        self._max_ratio = max_ratio
        self._ratio_after = ratio_after_bytes
        self._total = 0
        self._total_in = 0  # compressed bytes consumed (padding between members left out)
        self._members = 0
        self._member: zlib._Decompress | None = None

    @property
    def total_out(self) -> int:
        """Bytes decompressed so far."""
        return self._total

    def feed(self, data: bytes) -> bytes:
        """All the bytes data decompresses to (up to the cap: prefer feed_iter in a pipeline)."""
        return b"".join(self.feed_iter(data))

    def feed_iter(self, data: bytes) -> Iterator[bytes]:
        """Decompress data, raising DECOMPRESSED_TOO_LARGE once the output passes the cap."""
        while True:
            if self._member is None:
                data = self._start_member(data)
            member = self._member
            if member is None:
                return
            limit = min(self._piece, self._cap - self._total + 1)
            piece = self._inflate(member, data, limit)
            if piece:
                yield piece
            if member.eof:
                data, self._member = member.unused_data, None
            elif member.unconsumed_tail or len(piece) == limit:
                data = member.unconsumed_tail  # more output may be waiting inside zlib
            else:
                return

    def finish(self) -> bytes:
        """Check that the stream ended at the end of a member; nothing is left to return."""
        if self._member is not None:
            raise FileRejected(Reason.SOURCE_UNREADABLE, "the gzip stream is truncated")
        return b""

    def _start_member(self, data: bytes) -> bytes:
        if self._members:
            data = data.lstrip(b"\x00")  # zero padding after a member
        if data:
            self._member = zlib.decompressobj(wbits=31)
            self._members += 1
        return data

    def _inflate(self, member: zlib._Decompress, data: bytes, limit: int) -> bytes:
        try:
            piece = member.decompress(data, limit)
        except zlib.error as exc:
            raise FileRejected(Reason.SOURCE_UNREADABLE, f"corrupt gzip data: {exc}") from exc
        self._total += len(piece)
        self._total_in += len(data) - len(member.unconsumed_tail) - len(member.unused_data)
        if self._total > self._cap:
            raise FileRejected(
                Reason.DECOMPRESSED_TOO_LARGE,
                f"decompressed size passes the cap of {self._cap} bytes",
            )
        self._check_ratio()
        return piece

    def _check_ratio(self) -> None:
        ratio = self._max_ratio
        if ratio is None or self._total <= self._ratio_after:
            return
        if self._total > ratio * max(self._total_in, 1):
            raise FileRejected(
                Reason.DECOMPRESSED_TOO_LARGE,
                f"gzip expands more than {ratio} times ({self._total} bytes out of "
                f"{self._total_in}): a decompression bomb",
            )
