"""JSONL records from byte blocks: one object per line, numbers kept as written.

Each line is a record (blank lines are left out) and must hold a JSON object; its values become
text: strings as they are, ``true``/``false``, ``""`` for null, nested arrays and objects as
their JSON, numbers as written in the file (``1.50`` stays ``1.50``). The caps, the offsets and
the skip of an over-long line are the CSV reader's (:mod:`importer.read.base`), and so are the
character checks (:mod:`importer.read.text`).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from importer.core.models import Reason
from importer.read.base import RecordReader
from importer.read.records import RAW_CHARS, JsonRecord
from importer.read.text import char_problem, display


class JsonlReader(RecordReader[JsonRecord]):
    """One JSON object per line, from a stream of byte blocks; same limits as CsvReader."""

    _record_type = JsonRecord

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
        self._hold(buf[stop:], dirty)
        return out

    def _add(self, text: str, breaks: int, suspect: bool, out: list[JsonRecord]) -> None:
        line = self._line
        self._line += 1
        self._offset += self._decoder.count_bytes(text) + breaks * self._decoder.ascii_width
        if len(text) - text.endswith("\r") > self._max_record:  # as when skipped: never seen
            out.append(
                JsonRecord(
                    line, None, Reason.FIELD_TOO_LONG, display(text), self._offset, self._line
                )
            )
        elif text.strip():
            out.append(self._record(text, line, suspect))

    def _record(self, text: str, line: int, suspect: bool) -> JsonRecord:
        values, reason = None, char_problem(text) if suspect else None
        if reason is None:
            values, reason = _json_values(text)
        if values is not None:
            reason = self._values_problem(text, values)
        if reason is not None:
            return JsonRecord(line, None, reason, display(text), self._offset, self._line)
        raw = text[: RAW_CHARS + 1].rstrip("\r")[:RAW_CHARS]
        return JsonRecord(line, values, None, raw, self._offset, self._line)

    def _values_problem(self, text: str, values: dict[str, str]) -> Reason | None:
        if "\\u0000" in text and any("\x00" in k or "\x00" in v for k, v in values.items()):
            return Reason.NUL_BYTE  # from a \u0000 escape
        if max(map(len, values.values()), default=0) > self._max_field:
            return Reason.FIELD_TOO_LONG
        return None

    def _compress(self, text: str) -> None:
        """Drop the skipped line's text: the line ends at the next LF, whatever comes before."""
        skip = self._skip
        assert skip is not None  # only called while skipping
        skip.passing(text, self._decoder.count_bytes(text))
        self._buf = ""

    def _skip_to_end(self, buf: str, final: bool, out: list[JsonRecord]) -> int:
        """Where the skipped line ends in buf (its report appended), or -1 if not in buf."""
        newline = buf.find("\n")
        if newline < 0 and not final:
            self._compress(buf)
            return -1
        end = len(buf) if newline < 0 else newline + 1
        skip = self._end_skip(buf[:end])
        self._line += 1
        out.append(self._too_long(skip))
        return end


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
