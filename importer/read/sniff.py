"""Sniffing: the encoding (BOM, counted UTF-8 sequences, a Latin code page) and the delimiter."""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

import charset_normalizer

from importer.core.models import Reason
from importer.read.records import FileRejected, Sniffed
from importer.read.text import ASCII_WIDTH, ESCAPE, canonical

DELIMITERS = (",", ";", "\t", "|")  # the sniffer's candidates, in order of preference on a tie


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE, whose BOM is its prefix
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


# Codecs named without a byte order or BOM use, as the file is when it has no BOM.
_UNMARKED = {"utf-8-sig": "utf-8", "utf-16": "utf-16-le", "utf-32": "utf-32-le"}


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


_QUOTED_SPAN = re.compile(r'"[^"]*"')


_SURROGATE_RUN = re.compile("[\ud800-\udfff]+")  # one corrupt sequence: a run of escaped bytes


_TWO_BYTE_CHAR = re.compile("[\x80-\u07ff]")  # decoded from a valid two-byte UTF-8 sequence


_LONG_CHAR = re.compile("[\u0800-\ud7ff\ue000-\U0010ffff]")  # from three or four bytes


# Corrupt sequences allowed per valid multi-byte one before a sample is taken for a code page:
# real Windows-1252 pt-BR text has hundreds of accented letters per accidental valid pair.
_CORRUPT_PER_VALID = 16


_LONG_SEQUENCE_WEIGHT = 4  # a valid 3- or 4-byte sequence is far stronger evidence than 2 bytes


_ACCENTED_LETTER = re.compile(r"[^\W\d_a-zA-Z]")


_ASCII_LETTER = re.compile("[a-zA-Z]")


_MAX_ACCENTED_SHARE = 0.5  # accented letters per ASCII letter: pt-BR ~0.05, Cyrillic as 1252 ~10


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
    text = codecs.getincrementaldecoder(codec)(ESCAPE).decode(sample[bom_length:])
    if not text.strip():
        raise FileRejected(Reason.EMPTY_FILE, "the file holds no data")
    if delimiter is None:
        return Sniffed(codec, _detect_delimiter(text), bom_length)
    check_delimiter(delimiter)
    return Sniffed(codec, delimiter, bom_length)


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
    text = codecs.getincrementaldecoder("utf-8")(ESCAPE).decode(sample)
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


def check_delimiter(delimiter: str) -> None:
    if len(delimiter) != 1 or delimiter in '"\r\n':
        raise ValueError(f"a delimiter is one character, not a quote or line break: {delimiter!r}")


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


def _bom(sample: bytes) -> tuple[str | None, int]:
    for bom, codec in _BOMS:
        if sample.startswith(bom):
            return codec, len(bom)
    return None, 0


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
    codec = canonical(encoding)
    bom_codec, bom_length = _bom(sample)
    if bom_codec is not None:
        return bom_codec, bom_length
    codec = _UNMARKED.get(codec, codec)
    if codec not in ASCII_WIDTH:
        raise FileRejected(Reason.UNSUPPORTED_ENCODING, f"encoding {encoding!r} not supported")
    return codec, 0


def _detect_delimiter(text: str) -> str:
    unquoted = _QUOTED_SPAN.sub("", _first_record(text))
    counts = [unquoted.count(delimiter) for delimiter in DELIMITERS]
    most = max(counts)
    return DELIMITERS[counts.index(most)] if most else ","


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
