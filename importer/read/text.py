"""Text from bytes: the incremental decoder, the undecodable-byte escape and the character checks.

:class:`Decoder` turns one stream's bytes into text (BOM dropped, bytes counted back, an eye on
mojibake) for the codecs accepted (``ASCII_WIDTH``, by :func:`canonical` name); :func:`display`
is a record's text as the report shows it and :func:`char_problem` the record's encoding or NUL
problem. Undecodable bytes are decoded as lone surrogates (U+DC00 + byte) by the
``importer.bytes`` error handler (``ESCAPE``), so a bad record never stops the stream and is
reported with its line.
"""

from __future__ import annotations

import codecs
import re
import threading
from collections.abc import Callable

from importer.core.models import Reason
from importer.read.records import RAW_CHARS, FileRejected, Sniffed

ESCAPE = "importer.bytes"  # decoding error handler: undecodable byte b -> U+DC00 + b


# The codecs accepted (SPEC "Input"), with the bytes one ASCII character takes in each.
ASCII_WIDTH = {
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


_SINGLE_BYTE = frozenset({"cp1252", "iso8859-1", "iso8859-15", "ascii"})


SURROGATE = re.compile("[\ud800-\udfff]")


_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")  # an undecodable byte or a NUL


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


class Decoder:
    """Bytes to text for one stream: drops the BOM, decodes incrementally, counts bytes back.

    A single-byte code page also watches the bytes for UTF-8 sequences typical of UTF-8 text
    read as Windows-1252 ("Ã§", "â€™", "ðŸ" + 2): ``mojibake`` is the first found, as decoded.
    """

    __slots__ = (
        *("_bom_left", "_decoder", "_watch", "ascii_width"),
        *("byte_len", "encoding", "escaped", "mojibake"),
    )

    def __init__(self, sniffed: Sniffed, *, at_start: bool) -> None:
        encoding = canonical(sniffed.encoding)
        width = ASCII_WIDTH.get(encoding)
        if width is None:
            raise FileRejected(Reason.UNSUPPORTED_ENCODING, f"encoding {encoding!r} not supported")
        self._decoder = codecs.getincrementaldecoder(encoding)(ESCAPE)
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


def display(text: str) -> str:
    """A record's text as the report shows it: no line break, cut, bad bytes as \\xNN."""
    return _BAD_CHAR.sub(_escaped, text[: RAW_CHARS + 2].rstrip("\r\n"))[:RAW_CHARS]


def char_problem(text: str) -> Reason | None:
    if SURROGATE.search(text) is not None:
        return Reason.INVALID_ENCODING
    if "\x00" in text:
        return Reason.NUL_BYTE
    return None


def canonical(encoding: str) -> str:
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
    extra = ASCII_WIDTH[encoding] - 1  # an escaped byte re-encodes as a whole code unit

    def count(text: str) -> int:
        try:
            return len(text.encode(encoding))
        except UnicodeEncodeError:  # escaped bytes
            escaped = len(SURROGATE.findall(text))
            return len(text.encode(encoding, "surrogatepass")) - escaped * extra

    return count


def _escaped(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()) & 0xFF:02x}"


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


codecs.register_error(ESCAPE, _escape_bytes)
