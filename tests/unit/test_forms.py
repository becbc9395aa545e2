"""Streaming multipart/form-data: fields around the file, the file as a stream, limits."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from importer.core.errors import InvalidRequestError, RequestTooLargeError
from importer.http.forms import MAX_FIELD_BYTES, FilePart, boundary_of, read_form

BOUNDARY = b"----boundary42"


def form(*parts: tuple[str, bytes, str | None]) -> bytes:
    """Encode (name, value, filename) parts as a multipart body."""
    body = b""
    for name, value, filename in parts:
        disposition = f'form-data; name="{name}"'
        if filename is not None:
            disposition += f'; filename="{filename}"'
        body += b"--" + BOUNDARY + b"\r\n"
        body += f"Content-Disposition: {disposition}\r\n".encode()
        if filename is not None:
            body += b"Content-Type: text/csv\r\n"
        body += b"\r\n" + value + b"\r\n"
    return body + b"--" + BOUNDARY + b"--\r\n"


async def blocks(body: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


class Sink:
    def __init__(self) -> None:
        self.parts: list[tuple[FilePart, bytes, int]] = []

    async def __call__(self, part: FilePart, chunks: AsyncIterator[bytes]) -> int:
        data = b""
        count = 0
        async for chunk in chunks:
            data += chunk
            count += 1
        self.parts.append((part, data, count))
        return len(data)


async def parse(
    body: bytes, block: int = 7, limit: int = 10**9
) -> tuple[dict[str, str], Sink, int | None]:
    sink = Sink()
    fields, result = await read_form(blocks(body, block), BOUNDARY, sink, max_body_bytes=limit)
    return fields, sink, result


async def test_fields_before_and_after_the_file() -> None:
    content = b"nome,cpf\r\nAna,123\r\n" * 50
    body = form(
        ("conflict_strategy", b"merge", None),
        ("file", content, "lista.csv"),
        ("tags", "café".encode(), None),
    )
    fields, sink, result = await parse(body)
    assert fields == {"conflict_strategy": "merge", "tags": "café"}
    assert result == len(content)
    ((part, data, count),) = sink.parts
    assert (part.field, part.filename, part.content_type) == ("file", "lista.csv", "text/csv")
    assert data == content
    assert count > 1  # streamed in pieces, not collected first


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=3000), st.integers(min_value=1, max_value=400))
async def test_any_file_bytes_survive_any_block_split(content: bytes, block: int) -> None:
    body = form(("file", content, "x.bin"), ("a", b"1", None))
    fields, sink, _ = await parse(body, block)
    assert sink.parts[0][1] == content
    assert fields == {"a": "1"}


async def test_no_file_part() -> None:
    fields, sink, result = await parse(form(("a", b"1", None)))
    assert (fields, sink.parts, result) == ({"a": "1"}, [], None)


async def test_a_second_file_or_another_file_field_is_refused() -> None:
    with pytest.raises(InvalidRequestError):
        await parse(form(("file", b"a", "a.csv"), ("file", b"b", "b.csv")))
    with pytest.raises(InvalidRequestError):
        await parse(form(("other", b"a", "a.csv")))


async def test_repeated_field_is_refused() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        await parse(form(("a", b"1", None), ("a", b"2", None)))
    assert caught.value.problems == [("a", "is given more than once")]


async def test_truncated_body_is_refused() -> None:
    body = form(("file", b"abc" * 100, "x.csv"))
    with pytest.raises(InvalidRequestError, match="closing boundary"):
        await parse(body[:-40])


async def test_garbage_is_refused() -> None:
    with pytest.raises(InvalidRequestError):
        await parse(b"this is not multipart at all\r\n\r\n")


async def test_body_limit_and_field_limit() -> None:
    body = form(("file", b"x" * 5000, "x.csv"))
    with pytest.raises(RequestTooLargeError):
        await parse(body, block=1000, limit=4000)
    with pytest.raises(RequestTooLargeError):
        await parse(form(("layout", b"{" * (MAX_FIELD_BYTES + 1), None)), block=65536)


async def test_field_must_be_utf8() -> None:
    with pytest.raises(InvalidRequestError, match="UTF-8"):
        await parse(form(("a", b"\xff\xfe", None)))


def test_boundary_of() -> None:
    assert boundary_of("multipart/form-data; boundary=abc") == b"abc"
    assert boundary_of('multipart/form-data; boundary="a b"') == b"a b"
    assert boundary_of("application/json") is None
    assert boundary_of("multipart/form-data") is None
    assert boundary_of(None) is None
