"""CSV (RFC 4180) records from byte blocks, with the record and field caps enforced by hand.

CSV records are cut exactly as Python's csv module cuts them (quotes open a field only at its
start, "" inside quotes, CRLF/LF/CR line ends), then split with str.split when they hold no
quote and by csv otherwise. Memory stays bounded by the record cap plus one block whatever the
input: a record over the cap is skipped by keeping only the parser's state (as a prefix of at
most two characters), never its text, and it is reported ``field_too_long`` at its real end.
Undecodable bytes are decoded as lone surrogates (U+DC00 + byte), so a bad record never stops
the stream: any record holding one is reported ``invalid_encoding``, and U+FFFD never appears.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator

from importer.core.models import Reason
from importer.read.base import RecordReader, line_breaks
from importer.read.records import RAW_CHARS, RawRecord, Sniffed
from importer.read.sniff import check_delimiter
from importer.read.text import char_problem, display

_CSV_FIELD_LIMIT = 2**31 - 1  # csv's own cap, moved out of the way: ours is enforced by hand


_QUOTED_OPEN = re.compile(r'"[^"]*+(?:""[^"]*+)*+')  # a quoted field up to its closing quote


class CsvReader(RecordReader[RawRecord]):
    """RFC 4180 records from a stream of byte blocks (see the module docstring)."""

    _record_type = RawRecord

    def __init__(
        self,
        sniffed: Sniffed,
        *,
        max_field_chars: int = 65536,
        max_record_chars: int = 1048576,
        start_line: int = 1,
        start_offset: int = 0,
    ) -> None:
        check_delimiter(sniffed.delimiter)
        if csv.field_size_limit() < _CSV_FIELD_LIMIT:
            csv.field_size_limit(_CSV_FIELD_LIMIT)
        super().__init__(
            sniffed,
            max_field_chars=max_field_chars,
            max_record_chars=max_record_chars,
            start_line=start_line,
            start_offset=start_offset,
        )
        self._delimiter = sniffed.delimiter
        self._record, self._complete_fields = _csv_patterns(sniffed.delimiter)
        self._filler = "x" if sniffed.delimiter != "x" else "y"  # any char of an unquoted field
        self._check_over = min(max_field_chars, max_record_chars)
        self._prefix = 0  # while skipping, _buf starts with a state prefix of this length

    @property
    def delimiter(self) -> str:
        return self._delimiter

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
            self._hold(buf[end:], dirty)
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
        if len(lines) != line_breaks(region):
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
                line += line_breaks(text) if "\n" in content or "\r" in content else 1
            else:
                fields = content.split(delimiter)
                line += 1
            offset += len(text) * width if text.isascii() else byte_len(text)
            if suspect or len(text) > check_over:  # (a long blank record is too long too)
                reason = self._problem(content, fields)
                if reason is not None:
                    append(RawRecord(start, None, reason, display(content), offset, line))
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
        reason = char_problem(content)
        if reason is None and max(map(len, fields), default=0) > self._max_field:
            return Reason.FIELD_TOO_LONG
        return reason

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
        skip = self._end_skip(buf[self._prefix : end])
        self._line = skip.line + skip.lines
        out.append(self._too_long(skip))
        self._prefix, self._buf = 0, ""
        return end


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
