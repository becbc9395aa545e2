"""Object storage's pure parts: the key rule, the seal check, S3 error translation, part cutting."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import pytest
from botocore.exceptions import ClientError

from importer.adapters.storage.s3 import PartCutter, full_blocks, storage_error
from importer.core.errors import (
    ChecksumMismatchError,
    InvalidObjectKeyError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    StorageError,
)
from importer.core.objects import MAX_KEY_BYTES, StoredObject, check_key, check_sealed, key_problem


@pytest.mark.parametrize(
    "key",
    [
        "a",
        "uploads/1/6f1c/contacts.csv.gz",
        "a..b/c..",  # dots inside a segment are plain characters
        ".hidden",
        "ação/ç.csv",
        "é" * (MAX_KEY_BYTES // 2),  # 1024 bytes of UTF-8
        "x" * MAX_KEY_BYTES,
    ],
)
def test_safe_keys_pass(key: str) -> None:
    assert key_problem(key) is None
    assert check_key(key) == key


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("", "is empty"),
        ("x" * (MAX_KEY_BYTES + 1), "longer"),
        ("é" * (MAX_KEY_BYTES // 2) + "x", "longer"),  # 1025 bytes, 513 characters
        ("a\x00b", "NUL"),
        ("/etc/passwd", "absolute"),
        ("..", "segment"),
        ("../x", "segment"),
        ("a/../../x", "segment"),
        ("a/..", "segment"),
        ("./a", "segment"),
        ("a//b", "segment"),
        ("a/", "segment"),
        ("\ud800", "UTF-8"),  # a lone surrogate
    ],
)
def test_unsafe_keys_are_refused(key: str, problem: str) -> None:
    found = key_problem(key)
    assert found is not None
    assert problem in found
    with pytest.raises(InvalidObjectKeyError):
        check_key(key)


def test_check_sealed() -> None:
    digest = hashlib.sha256(b"abc").hexdigest()
    found = StoredObject("k", 3, digest)
    check_sealed(found, 3, digest)
    check_sealed(found, 3, digest.upper())  # hex is case-insensitive
    with pytest.raises(ChecksumMismatchError):
        check_sealed(found, 4, digest)
    with pytest.raises(ChecksumMismatchError):
        check_sealed(found, 3, hashlib.sha256(b"abd").hexdigest())


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "GetObject",
    )


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("NoSuchKey", 404, ObjectNotFoundError),
        ("404", 404, ObjectNotFoundError),  # HEAD responses carry no body, so no code
        ("PreconditionFailed", 412, ChecksumMismatchError),
        ("412", 412, ChecksumMismatchError),
        ("NoSuchBucket", 404, StorageError),
        ("AccessDenied", 403, StorageError),
        ("SlowDown", 503, StorageError),
    ],
)
def test_s3_errors_are_translated(code: str, status: int, expected: type[StorageError]) -> None:
    error = storage_error(_client_error(code, status), "k")
    assert type(error) is expected


async def _stream(pieces: list[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


async def _cut_all(cutter: PartCutter) -> list[bytes]:
    """What put_stream does: one part, then more until the stream is handed out."""
    parts = [await cutter.next_part()]
    while not cutter.finished:
        parts.append(await cutter.next_part())
    return parts


@pytest.mark.parametrize(
    ("pieces", "parts"),
    [
        ([], [b""]),  # an empty stream is one empty PutObject
        ([b"abc"], [b"abc"]),
        ([b"0123456789"], [b"0123456789"]),  # exactly one part: still a single PutObject
        ([b"01234", b"56789"], [b"0123456789"]),
        ([b"0123456789", b"a"], [b"0123456789", b"a"]),
        ([b"0123456789" * 2], [b"0123456789", b"0123456789"]),  # no empty last part
        ([b"012", b"3456789012", b"34567890123"], [b"0123456789", b"0123456789", b"0123"]),
    ],
)
async def test_parts_are_full_but_the_last(pieces: list[bytes], parts: list[bytes]) -> None:
    cutter = PartCutter(_stream(pieces), 1000, "k", part_size=10)
    assert await _cut_all(cutter) == parts
    assert cutter.size == sum(map(len, pieces))
    assert cutter.sha256 == hashlib.sha256(b"".join(pieces)).hexdigest()


async def test_cutter_refuses_past_max_bytes() -> None:
    cutter = PartCutter(_stream([b"x" * 6, b"x" * 5]), 10, "k", part_size=4)
    with pytest.raises(ObjectTooLargeError):
        await _cut_all(cutter)


class _TrickleBody:
    """A response body that hands out at most ``step`` bytes per read, as aiohttp may."""

    def __init__(self, data: bytes, step: int) -> None:
        self._data = data
        self._step = step

    async def read(self, amt: int) -> bytes:
        piece, self._data = self._data[: min(amt, self._step)], self._data[min(amt, self._step) :]
        return piece


@pytest.mark.parametrize("size", [0, 1, 9, 10, 11, 95])
async def test_full_blocks_coalesce_small_reads(size: int) -> None:
    data = bytes(range(size))
    body = _TrickleBody(data, step=3)
    blocks = [block async for block in full_blocks(body, 10)]  # type: ignore[arg-type]
    assert b"".join(blocks) == data
    assert all(len(block) == 10 for block in blocks[:-1])
    assert all(blocks)
