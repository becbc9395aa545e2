"""Uploaded files in a local directory: the object store when no S3 endpoint is configured.

File I/O runs in worker threads a block at a time, so the event loop never waits on the disk and
a cancelled operation stops at the next block. ``OSError`` is translated once, here: a missing
file becomes :class:`ObjectNotFoundError`, anything else :class:`StorageError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import BinaryIO

from importer.core.errors import (
    ChecksumMismatchError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    StorageError,
)
from importer.core.objects import StoredObject, check_key, check_sealed

# Bytes per thread hop when writing or hashing: large enough that the hop is noise.
IO_BLOCK = 1024 * 1024

# The object is not there: the file is missing, or a path component is a file or a directory.
_MISSING = (FileNotFoundError, NotADirectoryError, IsADirectoryError)


@contextlib.contextmanager
def translated_errors(key: str, *, reading: bool = True) -> Iterator[None]:
    """Translate OS errors into the importer's own, once, at the boundary.

    Only a read can find the object missing; a write that trips on the tree (a path component
    that is a file) is refused like any other failed write.
    """
    try:
        yield
    except _MISSING as exc:
        if not reading:
            raise StorageError(f"object {key!r}: {type(exc).__name__}: {exc.strerror}") from exc
        raise ObjectNotFoundError(f"object {key!r} does not exist") from exc
    except OSError as exc:
        raise StorageError(f"object {key!r}: {type(exc).__name__}: {exc.strerror}") from exc


def version_token(stat: os.stat_result) -> str:
    """Pins a file's bytes: an atomic replace makes a new inode, an edit in place a new mtime."""
    return f"{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}"


class LocalObjectStore:
    """The :class:`importer.ports.ObjectStore` on a directory of plain files.

    A put writes a temporary file next to its target and renames it over the target when the
    stream is complete and fsynced, so readers see the old object or the new one, never a part.
    """

    def __init__(self, root: Path) -> None:
        self._root = root.absolute()  # a later chdir must not move the store

    def _path(self, key: str) -> Path:
        return self._root / check_key(key)

    async def put_stream(
        self, key: str, chunks: AsyncIterator[bytes], max_bytes: int
    ) -> StoredObject:
        path = self._path(key)
        # Beside the target (a rename within one filesystem is atomic); a short name, so any
        # segment the file system takes as a key also takes its temporary file.
        temp = path.with_name(f".{uuid.uuid4().hex}.part")
        with translated_errors(key, reading=False):
            handle = await asyncio.to_thread(_create, temp)
            try:
                with handle:
                    size, sha256 = await _write_stream(handle, chunks, max_bytes, key)
                    await asyncio.to_thread(_seal, handle)
                await asyncio.to_thread(os.replace, temp, path)
            except BaseException:
                # Synchronous on purpose: one unlink, and it must happen even when cancelled.
                temp.unlink(missing_ok=True)
                raise
        return StoredObject(key, size, sha256)

    async def stat(self, key: str) -> StoredObject:
        found, _ = await self._hash(key)
        return found

    async def seal(self, key: str) -> tuple[StoredObject, str]:
        """The file's size and sha256 (to seal on a job), and the token pinning those bytes:
        one read where :meth:`stat` then :meth:`verify` would take two."""
        return await self._hash(key)

    async def verify(self, key: str, size: int, sha256: str) -> str:
        found, token = await self._hash(key)
        check_sealed(found, size, sha256)
        return token

    async def _hash(self, key: str) -> tuple[StoredObject, str]:
        """Size and sha256 of the file's bytes, with the token of the version that was read."""
        path = self._path(key)
        digest = hashlib.sha256()
        size = 0
        with translated_errors(key):
            handle = await asyncio.to_thread(open, path, "rb", buffering=0)
            with handle:
                token = version_token(os.fstat(handle.fileno()))
                while read := await asyncio.to_thread(_read_into_digest, handle, digest):
                    size += read
                _check_token(key, handle, token)  # not changed in place while we read it
        return StoredObject(key, size, digest.hexdigest()), token

    async def blocks(
        self, key: str, block_size: int, *, pinned: str | None = None, start: int = 0
    ) -> AsyncIterator[bytes]:
        """Read through one open handle: a file renamed over the key after we opened it does not
        change what this handle reads, so the pin is checked on the handle, first and last."""
        path = self._path(key)
        with translated_errors(key):
            handle = await asyncio.to_thread(open, path, "rb", buffering=0)
            with handle:
                if pinned is not None:
                    _check_token(key, handle, pinned)
                handle.seek(start)  # no I/O: only moves the file offset
                while block := await asyncio.to_thread(handle.read, block_size):
                    yield block
                if pinned is not None:
                    _check_token(key, handle, pinned)

    async def presign_put(self, key: str, expires_s: int) -> str | None:  # noqa: ARG002 (the port)
        """None: a directory has no URL (so ``expires_s`` has nothing to bound); the API offers
        its own upload route."""
        check_key(key)
        return None

    async def delete(self, key: str) -> None:
        """Nothing to delete is success, as on S3 (a key naming a directory holds no object)."""
        path = self._path(key)
        with contextlib.suppress(ObjectNotFoundError), translated_errors(key):
            await asyncio.to_thread(path.unlink)

    async def ensure_bucket(self) -> None:
        with translated_errors(str(self._root), reading=False):
            await asyncio.to_thread(self._root.mkdir, parents=True, exist_ok=True)


async def _write_stream(
    handle: BinaryIO, chunks: AsyncIterator[bytes], max_bytes: int, key: str
) -> tuple[int, str]:
    """Write the stream in ``IO_BLOCK`` blocks, hashing on the way; (size, sha256)."""
    digest = hashlib.sha256()
    size = 0
    pending = bytearray()
    async for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            raise ObjectTooLargeError(f"object {key!r} is larger than {max_bytes} bytes")
        digest.update(chunk)
        pending += chunk
        if len(pending) >= IO_BLOCK:
            await asyncio.to_thread(handle.write, pending)  # buffered: writes all of it
            pending.clear()
    if pending:
        await asyncio.to_thread(handle.write, pending)
    return size, digest.hexdigest()


def _create(temp: Path) -> BinaryIO:
    temp.parent.mkdir(parents=True, exist_ok=True)
    return temp.open("xb")


def _seal(handle: BinaryIO) -> None:
    """Make the bytes durable before the rename publishes them."""
    handle.flush()
    os.fsync(handle.fileno())


def _read_into_digest(handle: BinaryIO, digest: hashlib._Hash) -> int:
    block = handle.read(IO_BLOCK)
    digest.update(block)
    return len(block)


def _check_token(key: str, handle: BinaryIO, token: str) -> None:
    """``fstat`` on an open descriptor: metadata only, cheap enough for the event loop."""
    if version_token(os.fstat(handle.fileno())) != token:
        raise ChecksumMismatchError(f"object {key!r} changed since it was verified")
