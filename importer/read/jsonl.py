"""JSONL records from byte blocks: one object per line, numbers kept as written."""

from __future__ import annotations

import json
from typing import Any

import orjson

from importer.core.models import Reason
from importer.read.csvfile import _Skip
from importer.read.records import RAW_CHARS, JsonRecord, Sniffed
from importer.read.text import _SURROGATE, _char_problem, _Decoder, _display


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
