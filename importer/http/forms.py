"""Streaming ``multipart/form-data``: fields in memory (small, capped), the file part as a stream.

The request body is fed block by block to python-multipart's push parser; its callbacks queue
events that :func:`read_form` consumes. The file part's bytes go straight to a handler (the
object store's ``put_stream``) as they arrive, so memory holds one body block at a time whatever
the file's size. Fields may come before or after the file.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from python_multipart.exceptions import FormParserError, MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from importer.core.errors import InvalidRequestError, RequestTooLargeError

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

T = TypeVar("T")

# A form field (an option, a layout document, an intent) is small; the file is the big part.
MAX_FIELD_BYTES = 256 * 1024
MAX_FIELDS = 64
# Header lines and parts' headers: python-multipart's own caps keep them bounded too.
MAX_PART_HEADER_BYTES = 8 * 1024
# The request body may exceed the file's limit by this much (boundaries, part headers, fields).
FORM_OVERHEAD_BYTES = MAX_FIELDS * 1024 + 2 * MAX_FIELD_BYTES


def malformed(message: str) -> InvalidRequestError:
    return InvalidRequestError([("body", message)])


@dataclass(frozen=True, slots=True)
class FilePart:
    """The file part's metadata; its bytes are streamed to the handler."""

    field: str
    filename: str
    content_type: str | None


@dataclass(slots=True)
class _Events:
    """python-multipart callbacks → a queue of (kind, bytes) events, drained after each write."""

    queue: deque[tuple[str, bytes]] = field(default_factory=deque)

    def _data(self, kind: str) -> Callable[[bytes, int, int], None]:
        return lambda buf, start, end: self.queue.append((kind, bytes(buf[start:end])))

    def _mark(self, kind: str) -> Callable[[], None]:
        return lambda: self.queue.append((kind, b""))

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self._mark("begin"),
            "on_header_field": self._data("header_field"),
            "on_header_value": self._data("header_value"),
            "on_header_end": self._mark("header_end"),
            "on_headers_finished": self._mark("headers"),
            "on_part_data": self._data("data"),
            "on_part_end": self._mark("end"),
            "on_end": self._mark("done"),
        }

    def drain(self) -> Iterator[tuple[str, bytes]]:
        while self.queue:
            yield self.queue.popleft()


async def _events(
    body: AsyncIterator[bytes], boundary: bytes, max_body_bytes: int
) -> AsyncIterator[tuple[str, bytes]]:
    """The parser's events as the body arrives; the body's size is capped on the way."""
    events = _Events()
    parser = MultipartParser(boundary, events.callbacks(), max_header_size=MAX_PART_HEADER_BYTES)
    received = 0
    finished = False
    async for block in body:
        received += len(block)
        if received > max_body_bytes:
            raise RequestTooLargeError(f"the request body is larger than {max_body_bytes} bytes")
        try:
            parser.write(block)
        except (MultipartParseError, FormParserError):
            raise malformed("malformed multipart body") from None
        for event in events.drain():
            finished = finished or event[0] == "done"
            yield event
    parser.finalize()
    for event in events.drain():
        finished = finished or event[0] == "done"
        yield event
    if not finished:
        raise malformed("the multipart body ends before its closing boundary")


def _part_headers(raw: list[tuple[bytes, bytes]]) -> tuple[str, str | None, str | None]:
    """(field name, file name or None, content type or None) from a part's headers."""
    headers = {name.strip().lower(): value for name, value in raw}
    disposition, options = parse_options_header(headers.get(b"content-disposition", b""))
    if disposition != b"form-data" or b"name" not in options:
        raise malformed("each part needs Content-Disposition: form-data; name=...")
    name = options[b"name"].decode("utf-8", "replace")
    filename = options.get(b"filename")
    content_type = headers.get(b"content-type")
    return (
        name,
        filename.decode("utf-8", "replace") if filename is not None else None,
        content_type.decode("latin-1") if content_type is not None else None,
    )


async def read_form(
    body: AsyncIterator[bytes],
    boundary: bytes,
    on_file: Callable[[FilePart, AsyncIterator[bytes]], Awaitable[T]],
    *,
    file_field: str = "file",
    max_body_bytes: int,
) -> tuple[dict[str, str], T | None]:
    """Parse the form; call ``on_file`` once with the file part's byte stream.

    Returns the fields (decoded as UTF-8) and what ``on_file`` returned (None without a file
    part). ``on_file`` must consume the stream to its end; anything it raises propagates.
    """
    reader = _FormReader(_events(body, boundary, max_body_bytes), on_file, file_field)
    await reader.run()
    return reader.fields, reader.result


class _FormReader(Generic[T]):
    """Walks the parser's events: headers are collected per part, then the part is a field
    (kept, capped) or the file (handed over as a stream)."""

    def __init__(
        self,
        events: AsyncIterator[tuple[str, bytes]],
        on_file: Callable[[FilePart, AsyncIterator[bytes]], Awaitable[T]],
        file_field: str,
    ) -> None:
        self._events = events
        self._on_file = on_file
        self._file_field = file_field
        self._headers: list[tuple[bytes, bytes]] = []
        self._header = (bytearray(), bytearray())
        self.fields: dict[str, str] = {}
        self.result: T | None = None
        self._seen_file = False

    async def run(self) -> None:
        async for kind, data in self._events:
            if kind == "header_field":
                self._header[0].extend(data)
            elif kind == "header_value":
                self._header[1].extend(data)
            elif kind == "header_end":
                self._headers.append((bytes(self._header[0]), bytes(self._header[1])))
                self._header = (bytearray(), bytearray())
            elif kind == "headers":
                await self._part(*_part_headers(self._headers))
                self._headers = []

    async def _part(self, name: str, filename: str | None, content_type: str | None) -> None:
        if filename is None:
            _add_field(self.fields, name, await _field_value(self._events))
            return
        if name != self._file_field or self._seen_file:
            raise malformed(f"only one file part, named {self._file_field!r}, is accepted")
        self._seen_file = True
        stream = _part_data(self._events)
        self.result = await self._on_file(FilePart(name, filename, content_type), stream)
        if await _has_more(stream):
            raise malformed("the file handler stopped before the end of the file")


async def _part_data(events: AsyncIterator[tuple[str, bytes]]) -> AsyncIterator[bytes]:
    """The current part's bytes, until its end."""
    async for kind, data in events:
        if kind == "end":
            return
        if kind == "data" and data:
            yield data


async def _has_more(stream: AsyncIterator[bytes]) -> bool:
    async for _ in stream:
        return True
    return False


async def _field_value(events: AsyncIterator[tuple[str, bytes]]) -> str:
    value = bytearray()
    async for data in _part_data(events):
        value += data
        if len(value) > MAX_FIELD_BYTES:
            raise RequestTooLargeError(f"a form field is larger than {MAX_FIELD_BYTES} bytes")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise malformed("a form field is not valid UTF-8") from None


def _add_field(fields: dict[str, str], name: str, value: str) -> None:
    if name in fields:
        raise InvalidRequestError([(name, "is given more than once")])
    if len(fields) >= MAX_FIELDS:
        raise malformed(f"more than {MAX_FIELDS} form fields")
    fields[name] = value


def boundary_of(content_type: str | None) -> bytes | None:
    """The boundary of a ``multipart/form-data`` Content-Type, or None for any other type."""
    if content_type is None:
        return None
    kind, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        return None
    return boundary
