"""Both object stores against their real backends: moto's S3 server and a local directory."""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import os
import random
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import aioboto3
import pytest

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.storage.local import LocalObjectStore
from importer.adapters.storage.s3 import PART_SIZE
from importer.core.errors import (
    ChecksumMismatchError,
    FileRejectedError,
    InvalidObjectKeyError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    StorageError,
)
from importer.core.models import Channel, ConflictStrategy, InputFormat, JobStatus, Reason
from importer.core.objects import StoredObject
from importer.core.reference import ContactState
from importer.ports import ObjectStore
from importer.services.local import ImportRequest, import_source
from importer.services.runs import ObjectSource
from importer.settings import Settings
from importer.wiring import object_store
from tests.support import cpf, db_state

if TYPE_CHECKING:
    from aiobotocore.session import ClientCreatorContext
    from types_aiobotocore_s3.client import S3Client

pytestmark = pytest.mark.integration

# Fake credentials, passed explicitly: nothing is read from the environment.
REGION = "us-east-1"
ACCESS_KEY_ID = "test"
SECRET_ACCESS_KEY = "test"
MIB = 1024 * 1024


@dataclass(frozen=True)
class Backend:
    kind: str  # "s3" or "local"
    settings: Settings
    store: ObjectStore


@pytest.fixture(params=["s3", "local"])
def store_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "local":
        return Settings(storage_dir=str(tmp_path / "objects"))
    return Settings(
        s3_endpoint_url=request.getfixturevalue("s3_endpoint"),
        bucket=f"importer-test-{uuid.uuid4().hex[:12]}",
        aws_region=REGION,
        aws_access_key_id=ACCESS_KEY_ID,
        aws_secret_access_key=SECRET_ACCESS_KEY,
    )


@pytest.fixture
async def backend(store_settings: Settings) -> Backend:
    store = object_store(store_settings)  # the factory chooses by the settings
    await store.ensure_bucket()
    await store.ensure_bucket()  # idempotent
    kind = "local" if store_settings.s3_endpoint_url is None else "s3"
    return Backend(kind, store_settings, store)


# --- helpers ----------------------------------------------------------------------------------


async def stream(pieces: Iterable[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


def generated(total: int, piece: int, seed: int = 0) -> Iterator[bytes]:
    """``total`` pseudo-random bytes in pieces of ``piece`` bytes, never all in memory."""
    rng = random.Random(seed)
    while total > 0:
        size = min(piece, total)
        yield rng.randbytes(size)
        total -= size


def described(pieces: Iterable[bytes]) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    for piece in pieces:
        digest.update(piece)
        size += len(piece)
    return size, digest.hexdigest()


async def read_all(blocks: AsyncIterator[bytes]) -> bytes:
    return b"".join([block async for block in blocks])


async def put(store: ObjectStore, key: str, data: bytes) -> StoredObject:
    return await store.put_stream(key, stream([data]), max_bytes=len(data) + 1)


async def failing_after(pieces: Iterable[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece
    raise RuntimeError("the client went away")


def raw_s3(settings: Settings) -> ClientCreatorContext[S3Client]:
    session = aioboto3.Session(
        aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY, region_name=REGION
    )
    return session.client("s3", endpoint_url=settings.s3_endpoint_url)


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def leftovers(backend: Backend) -> list[str]:
    """Everything the store holds: objects and, on S3, pending multipart uploads; on disk,
    every file (temporary ones included)."""
    if backend.kind == "local":
        return files_under(Path(backend.settings.storage_dir))
    async with raw_s3(backend.settings) as client:
        bucket = backend.settings.bucket
        objects = await client.list_objects_v2(Bucket=bucket)
        uploads = await client.list_multipart_uploads(Bucket=bucket)
    return sorted(
        [o["Key"] for o in objects.get("Contents", [])]
        + [f"upload:{u['Key']}" for u in uploads.get("Uploads", [])]
    )


# --- round trips ------------------------------------------------------------------------------


async def test_small_round_trip(backend: Backend) -> None:
    store, key = backend.store, "uploads/1/contacts.csv"
    data = b"nome,cpf\nAna,12345678909\n"
    stored = await store.put_stream(key, stream([data[:5], data[5:]]), max_bytes=len(data))
    assert stored == StoredObject(key, len(data), hashlib.sha256(data).hexdigest())
    assert await store.stat(key) == stored
    token = await store.verify(key, stored.size, stored.sha256)
    assert token
    blocks = [block async for block in store.blocks(key, 4, pinned=token)]
    assert b"".join(blocks) == data
    assert all(len(block) == 4 for block in blocks[:-1])
    assert await read_all(store.blocks(key, 1024)) == data
    assert await leftovers(backend) == [key]


async def test_multipart_round_trip(backend: Backend) -> None:
    """20 MiB in odd-sized pieces: on S3 three parts (8 + 8 + 4 MiB)."""
    store, key = backend.store, "uploads/big.csv"
    total, piece = 20 * MIB, 777_777
    stored = await store.put_stream(key, stream(generated(total, piece)), max_bytes=total)
    assert (stored.size, stored.sha256) == described(generated(total, piece))
    token = await store.verify(key, stored.size, stored.sha256)
    if backend.kind == "s3":  # a multipart ETag ends in the number of parts
        assert token.strip('"').endswith("-3")
    digest, size = hashlib.sha256(), 0
    async for block in store.blocks(key, 256 * 1024, pinned=token):
        assert len(block) <= 256 * 1024
        digest.update(block)
        size += len(block)
    assert (size, digest.hexdigest()) == (stored.size, stored.sha256)
    assert await store.stat(key) == stored


@pytest.mark.parametrize(("size", "parts"), [(PART_SIZE, 1), (PART_SIZE + 1, 2)])
async def test_part_boundary(backend: Backend, size: int, parts: int) -> None:
    """A stream of exactly one part is a single PutObject; one byte more makes two parts."""
    key = "uploads/edge.bin"
    stored = await backend.store.put_stream(key, stream(generated(size, MIB)), max_bytes=size)
    token = await backend.store.verify(key, size, stored.sha256)
    if backend.kind == "s3":
        etag = token.strip('"')
        assert etag.endswith("-2") if parts == 2 else "-" not in etag


async def test_empty_object(backend: Backend) -> None:
    stored = await backend.store.put_stream("empty.csv", stream([]), max_bytes=1)
    assert stored == StoredObject("empty.csv", 0, hashlib.sha256(b"").hexdigest())
    token = await backend.store.verify("empty.csv", 0, stored.sha256)
    assert await read_all(backend.store.blocks("empty.csv", 10, pinned=token)) == b""


async def test_ranged_start(backend: Backend) -> None:
    store, key = backend.store, "ranged.bin"
    data = bytes(range(256)) * 4
    stored = await put(store, key, data)
    token = await store.verify(key, stored.size, stored.sha256)
    assert await read_all(store.blocks(key, 100, start=10)) == data[10:]
    assert await read_all(store.blocks(key, 100, pinned=token, start=1000)) == data[1000:]
    assert await read_all(store.blocks(key, 100, pinned=token, start=len(data))) == b""
    assert await read_all(store.blocks(key, 100, start=len(data) + 5)) == b""


# --- all or nothing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "max_bytes"), [(5000, 1000), (2 * PART_SIZE + 10, PART_SIZE + 2 * MIB)]
)
async def test_too_large_leaves_nothing(backend: Backend, total: int, max_bytes: int) -> None:
    """Refused mid-stream (the second case after a part was uploaded): no object, no upload."""
    with pytest.raises(ObjectTooLargeError):
        await backend.store.put_stream("big.csv", stream(generated(total, MIB)), max_bytes)
    with pytest.raises(ObjectNotFoundError):
        await backend.store.stat("big.csv")
    assert await leftovers(backend) == []


async def test_failing_stream_leaves_nothing(backend: Backend) -> None:
    chunks = failing_after(generated(12 * MIB, MIB))  # fails after the first part went up
    with pytest.raises(RuntimeError, match="went away"):
        await backend.store.put_stream("broken.csv", chunks, max_bytes=100 * MIB)
    assert await leftovers(backend) == []


async def test_failed_replacement_keeps_the_old_object(backend: Backend) -> None:
    old = await put(backend.store, "k.csv", b"old bytes")
    with pytest.raises(ObjectTooLargeError):
        await backend.store.put_stream("k.csv", stream([b"x" * 100]), max_bytes=10)
    assert await backend.store.stat("k.csv") == old


# --- verification and pinning -----------------------------------------------------------------


async def test_verify_mismatch(backend: Backend) -> None:
    stored = await put(backend.store, "v.csv", b"some bytes")
    with pytest.raises(ChecksumMismatchError):
        await backend.store.verify("v.csv", stored.size + 1, stored.sha256)
    with pytest.raises(ChecksumMismatchError):
        await backend.store.verify("v.csv", stored.size, hashlib.sha256(b"other").hexdigest())


async def test_replaced_object_fails_pinned_read(backend: Backend) -> None:
    store, key = backend.store, "pinned.csv"
    first = await put(store, key, b"first version")
    token = await store.verify(key, first.size, first.sha256)
    second = await put(store, key, b"other version")  # same size, other bytes
    with pytest.raises(ChecksumMismatchError):
        await read_all(store.blocks(key, 4, pinned=token))
    with pytest.raises(ChecksumMismatchError):
        await read_all(store.blocks(key, 4, pinned=token, start=3))
    assert await store.verify(key, second.size, second.sha256) != token
    assert await read_all(store.blocks(key, 4)) == b"other version"


async def test_local_edit_in_place_fails_pinned_read(tmp_path: Path) -> None:
    """A file rewritten in place while it is read: the pin is checked again after the last
    block (an atomic replace does not disturb an open handle, an in-place edit does)."""
    store = LocalObjectStore(tmp_path)
    stored = await put(store, "f.csv", b"a" * 100)
    token = await store.verify("f.csv", stored.size, stored.sha256)
    blocks = store.blocks("f.csv", 10, pinned=token)
    assert await anext(blocks) == b"a" * 10
    with (tmp_path / "f.csv").open("r+b") as edit:
        edit.write(b"b" * 10)
    os.utime(tmp_path / "f.csv", ns=(0, 0))  # the mtime moves even on a coarse clock
    with pytest.raises(ChecksumMismatchError):
        async for _ in blocks:
            pass


async def test_missing_key(backend: Backend) -> None:
    store = backend.store
    with pytest.raises(ObjectNotFoundError):
        await store.stat("nothing/here.csv")
    with pytest.raises(ObjectNotFoundError):
        await store.verify("nothing/here.csv", 0, hashlib.sha256(b"").hexdigest())
    with pytest.raises(ObjectNotFoundError):
        await read_all(store.blocks("nothing/here.csv", 10))
    with pytest.raises(ObjectNotFoundError):
        await read_all(store.blocks("nothing/here.csv", 10, pinned='"abc"'))


async def test_delete_is_idempotent(backend: Backend) -> None:
    await put(backend.store, "d.csv", b"x")
    await backend.store.delete("d.csv")
    await backend.store.delete("d.csv")
    await backend.store.delete("never/was.csv")
    with pytest.raises(ObjectNotFoundError):
        await backend.store.stat("d.csv")
    assert await leftovers(backend) == []


@pytest.mark.parametrize("key", ["../escape.csv", "/etc/passwd", "a/../../b", "a\x00b", "x" * 1025])
async def test_unsafe_keys_are_refused(backend: Backend, tmp_path: Path, key: str) -> None:
    store = backend.store
    with pytest.raises(InvalidObjectKeyError):
        await store.put_stream(key, stream([b"x"]), max_bytes=10)
    with pytest.raises(InvalidObjectKeyError):
        await store.stat(key)
    with pytest.raises(InvalidObjectKeyError):
        await store.verify(key, 1, "0" * 64)
    with pytest.raises(InvalidObjectKeyError):
        await read_all(store.blocks(key, 10))
    with pytest.raises(InvalidObjectKeyError):
        await store.presign_put(key, 60)
    with pytest.raises(InvalidObjectKeyError):
        await store.delete(key)
    assert files_under(tmp_path) == []


# --- presigned upload -------------------------------------------------------------------------


def http_put(url: str, body: bytes) -> int:
    # An explicit type: urllib's default (form-urlencoded) makes moto's server parse the body
    # as a form and store nothing.
    request = urllib.request.Request(
        url, data=body, method="PUT", headers={"Content-Type": "application/octet-stream"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


async def test_presigned_put(backend: Backend) -> None:
    url = await backend.store.presign_put("uploads/presigned.csv", 60)
    if backend.kind == "local":
        assert url is None
        return
    assert url is not None
    body = b"nome,cpf\nBia,98765432100\n"
    assert await asyncio.to_thread(http_put, url, body) == 200
    stored = await backend.store.stat("uploads/presigned.csv")
    assert (stored.size, stored.sha256) == (len(body), hashlib.sha256(body).hexdigest())


# --- the pipeline's source --------------------------------------------------------------------


def contacts_csv(count: int) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["nome", "cpf", "email"])
    writer.writerows([f"Pessoa {i}", cpf(i), f"p{i}@example.com.br"] for i in range(1, count + 1))
    return out.getvalue().encode()


async def test_object_source_reads_the_pinned_bytes(backend: Backend) -> None:
    store, key = backend.store, "uploads/7/contacts.csv"
    data = contacts_csv(50)
    stored = await put(store, key, data)
    source = await ObjectSource.verified(store, key, stored.size, stored.sha256)
    assert (source.name, source.size) == ("contacts.csv", len(data))
    assert await read_all(source.blocks(100)) == data
    await put(store, key, data.replace(b"Pessoa", b"Pessoo"))
    with pytest.raises(FileRejectedError) as replaced:
        await read_all(source.blocks(100))
    assert replaced.value.reason is Reason.CHECKSUM_MISMATCH
    await store.delete(key)
    with pytest.raises(FileRejectedError) as deleted:
        await read_all(source.blocks(100))
    assert deleted.value.reason is Reason.SOURCE_UNREADABLE


async def _import(dsn: str, source: ObjectSource, client_id: int) -> tuple[JobStatus, str | None]:
    settings = Settings(database_url=dsn, chunk_size=20, concurrency=2, read_block_bytes=1024)
    request = ImportRequest(
        client_id=client_id,
        strategy=ConflictStrategy.MERGE,
        input_format=InputFormat.CSV,
        chunk_size=20,
        concurrency=2,
    )
    pool = await connect_pool(dsn, 3)
    try:
        outcome = await import_source(PostgresJobQueue(pool), source, request, settings)
    finally:
        await pool.close()
    assert outcome.counters.balanced
    return outcome.status, outcome.fail_reason


async def test_import_from_the_object_store(backend: Backend, db_dsn: str) -> None:
    store, key = backend.store, "uploads/31/contacts.csv"
    stored = await put(store, key, contacts_csv(50))
    source = await ObjectSource.verified(store, key, stored.size, stored.sha256)
    assert await _import(db_dsn, source, 31) == (JobStatus.COMPLETED, None)
    state = await db_state(db_dsn, 31)
    assert len(state) == 50
    assert state[cpf(7)] == ContactState(
        "Pessoa 7", None, {(Channel.EMAIL, "p7@example.com.br")}, {}
    )


async def test_import_of_a_replaced_object_fails(backend: Backend, db_dsn: str) -> None:
    store, key = backend.store, "uploads/32/contacts.csv"
    stored = await put(store, key, contacts_csv(50))
    source = await ObjectSource.verified(store, key, stored.size, stored.sha256)
    await put(store, key, contacts_csv(60))
    assert await _import(db_dsn, source, 32) == (JobStatus.FAILED, "checksum_mismatch")


async def test_local_keys_that_trip_on_the_tree(tmp_path: Path) -> None:
    """A key under a file, or naming a directory: reads find nothing, writes are refused."""
    store = LocalObjectStore(tmp_path)
    await put(store, "a", b"file")
    await put(store, "d/x", b"nested")
    with pytest.raises(ObjectNotFoundError):
        await store.stat("a/b")
    with pytest.raises(ObjectNotFoundError):
        await store.stat("d")
    with pytest.raises(StorageError) as refused:
        await put(store, "a/b", b"under a file")
    assert not isinstance(refused.value, ObjectNotFoundError)
    await store.delete("a/b")
    await store.delete("d")
    assert files_under(tmp_path) == ["a", "d/x"]
