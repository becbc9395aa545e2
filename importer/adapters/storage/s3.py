"""S3 adapter (aioboto3): the object store on S3 or an S3-compatible service (MinIO, moto).

The only module importing aioboto3/botocore. Their errors are translated once, here: a missing
key becomes :class:`ObjectNotFoundError`, a failed ``If-Match`` :class:`ChecksumMismatchError`,
anything else (refusals, connection losses, time-outs, truncated bodies) :class:`StorageError`.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, cast

import aioboto3
from aiobotocore.config import AioConfig
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
)

from importer.core.errors import (
    ChecksumMismatchError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    StorageError,
    StorageUnreachableError,
)
from importer.core.objects import StoredObject, check_key, check_sealed

if TYPE_CHECKING:
    from aiobotocore.response import StreamingBody
    from aiobotocore.session import ClientCreatorContext
    from types_aiobotocore_s3.client import S3Client
    from types_aiobotocore_s3.literals import BucketLocationConstraintType
    from types_aiobotocore_s3.type_defs import CompletedPartTypeDef, GetObjectRequestTypeDef

# Multipart part size: S3 wants at least 5 MiB for every part but the last; a stream that fits
# in one part goes up in a single PutObject. At most one part is held in memory.
PART_SIZE = 8 * 1024 * 1024
# Bytes asked of the response body per read when hashing a whole object.
HASH_READ = 1024 * 1024

_NOT_FOUND = frozenset({"NoSuchKey", "NotFound", "404"})
_PRECONDITION_FAILED = frozenset({"PreconditionFailed", "412"})
_NO_BUCKET = frozenset({"NoSuchBucket", "NotFound", "404"})


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def storage_error(exc: ClientError, key: str) -> StorageError:
    """The importer's error for an S3 refusal of an operation on ``key``."""
    code = error_code(exc)
    if code in _NOT_FOUND:
        return ObjectNotFoundError(f"object {key!r} does not exist")
    if code in _PRECONDITION_FAILED:
        return ChecksumMismatchError(f"object {key!r} changed since it was verified")
    message = exc.response.get("Error", {}).get("Message", "")
    return StorageError(f"object {key!r}: {code or type(exc).__name__}: {message}")


@contextlib.contextmanager
def translated_errors(key: str, endpoint: str | None = None) -> Iterator[None]:
    """Translate botocore errors into the importer's own, once, at the boundary; an endpoint
    that cannot be connected to is :class:`StorageUnreachableError`."""
    try:
        yield
    except ClientError as exc:
        raise storage_error(exc, key) from exc
    except (EndpointConnectionError, ConnectTimeoutError) as exc:
        raise StorageUnreachableError(endpoint or "AWS S3", f"{type(exc).__name__}: {exc}") from exc
    except BotoCoreError as exc:  # connection, time-out, truncated or unreadable body
        raise StorageError(f"object {key!r}: {type(exc).__name__}: {exc}") from exc


class S3ObjectStore:
    """The :class:`importer.ports.ObjectStore` on one S3 bucket.

    One aioboto3 session for the store's life, one client per operation. Operations are coarse —
    one per file: an upload, a verify, the stream of a whole import — so a client's set-up (a
    few milliseconds, one connection) is noise next to the bytes it moves. In return the store
    owns nothing that must be closed: the factory returns a plain value, it works from any event
    loop (an aiohttp session is bound to the loop that made it), and no idle connection outlives
    its operation. If presigning per API request ever shows in a profile, the API's lifespan can
    own one client and hand it in.
    """

    def __init__(
        self,
        *,
        bucket: str,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
    ) -> None:
        self.bucket = bucket
        self._endpoint_url = endpoint_url
        self._region = region
        # Unset credentials fall back to botocore's chain (profile, instance role, …).
        self._session = aioboto3.Session(
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            region_name=region,
        )
        self._config = AioConfig(
            # SigV4 everywhere: presigned URLs otherwise fall back to SigV2 on custom endpoints.
            signature_version="s3v4",
            # We hash every object ourselves (sha256, checked by `verify`); botocore's default
            # CRC trailers are refused by some S3-compatible services.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )

    def _client(self) -> ClientCreatorContext[S3Client]:
        return self._session.client("s3", endpoint_url=self._endpoint_url, config=self._config)

    # --- writes -------------------------------------------------------------------------------

    async def put_stream(
        self, key: str, chunks: AsyncIterator[bytes], max_bytes: int
    ) -> StoredObject:
        """One PutObject when the stream fits in a part, else a multipart upload."""
        check_key(key)
        parts = PartCutter(chunks, max_bytes, key)
        with translated_errors(key, self._endpoint_url):
            async with self._client() as client:
                first = await parts.next_part()
                if parts.finished:
                    await client.put_object(Bucket=self.bucket, Key=key, Body=first)
                else:
                    await self._multipart(client, key, first, parts)
        return StoredObject(key, parts.size, parts.sha256)

    async def _multipart(self, client: S3Client, key: str, first: bytes, parts: PartCutter) -> None:
        upload_id = (await client.create_multipart_upload(Bucket=self.bucket, Key=key))["UploadId"]
        try:
            done: list[CompletedPartTypeDef] = []
            part = first
            while True:
                number = len(done) + 1
                uploaded = await client.upload_part(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=part
                )
                done.append({"PartNumber": number, "ETag": uploaded["ETag"]})
                if parts.finished:
                    break
                part = await parts.next_part()
            await client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": done}
            )
        except BaseException:  # too large, a failing stream, S3, cancellation: leave nothing
            await self._abort(client, key, upload_id)
            raise

    async def _abort(self, client: S3Client, key: str, upload_id: str) -> None:
        """Best effort: the error that made us abort is the one to report. An upload left
        behind anyway is reaped by the bucket's AbortIncompleteMultipartUpload lifecycle rule."""
        with contextlib.suppress(ClientError, BotoCoreError):
            await client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)

    async def delete(self, key: str) -> None:
        """DeleteObject succeeds on a missing key: idempotent as it comes."""
        check_key(key)
        with translated_errors(key, self._endpoint_url):
            async with self._client() as client:
                await client.delete_object(Bucket=self.bucket, Key=key)

    async def ensure_bucket(self) -> None:
        with translated_errors(self.bucket, self._endpoint_url):
            async with self._client() as client:
                try:
                    await client.head_bucket(Bucket=self.bucket)
                except ClientError as exc:
                    if error_code(exc) not in _NO_BUCKET:
                        raise
                else:
                    return
                await self._create_bucket(client)

    async def _create_bucket(self, client: S3Client) -> None:
        try:
            if self._region in (None, "us-east-1"):  # the one region that takes no constraint
                await client.create_bucket(Bucket=self.bucket)
            else:
                region = cast("BucketLocationConstraintType", self._region)
                await client.create_bucket(
                    Bucket=self.bucket, CreateBucketConfiguration={"LocationConstraint": region}
                )
        except ClientError as exc:
            if error_code(exc) != "BucketAlreadyOwnedByYou":  # a concurrent ensure_bucket won
                raise

    # --- reads --------------------------------------------------------------------------------

    async def stat(self, key: str) -> StoredObject:
        found, _ = await self._hash(key)
        return found

    async def seal(self, key: str) -> tuple[StoredObject, str]:
        return await self._hash(key)

    async def verify(self, key: str, size: int, sha256: str) -> str:
        """The ETag returned is the one of the response whose bytes were hashed."""
        found, etag = await self._hash(key)
        check_sealed(found, size, sha256)
        return etag

    async def _hash(self, key: str) -> tuple[StoredObject, str]:
        check_key(key)
        digest = hashlib.sha256()
        size = 0
        with translated_errors(key, self._endpoint_url):
            async with self._client() as client:
                response = await client.get_object(Bucket=self.bucket, Key=key)
                async for chunk in response["Body"].iter_chunks(HASH_READ):
                    digest.update(chunk)
                    size += len(chunk)
        return StoredObject(key, size, digest.hexdigest()), response["ETag"]

    async def blocks(
        self, key: str, block_size: int, *, pinned: str | None = None, start: int = 0
    ) -> AsyncIterator[bytes]:
        """One ranged GetObject; ``If-Match: pinned`` makes S3 refuse a replaced object (412).

        S3 evaluates ``If-Match`` before ``Range``, so a start at the very end of the pinned
        object yields nothing, while a replaced one still fails.
        """
        check_key(key)
        request: GetObjectRequestTypeDef = {"Bucket": self.bucket, "Key": key}
        if pinned is not None:
            request["IfMatch"] = pinned
        if start:
            request["Range"] = f"bytes={start}-"
        with translated_errors(key, self._endpoint_url):
            async with self._client() as client:
                try:
                    response = await client.get_object(**request)
                except ClientError as exc:
                    if error_code(exc) == "InvalidRange":  # start at or past the end
                        return
                    raise
                async for block in full_blocks(response["Body"], block_size):
                    yield block

    async def presign_put(self, key: str, expires_s: int) -> str | None:
        check_key(key)
        with translated_errors(key, self._endpoint_url):
            async with self._client() as client:
                return await client.generate_presigned_url(
                    "put_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_s
                )


async def full_blocks(body: StreamingBody, block_size: int) -> AsyncIterator[bytes]:
    """Blocks of exactly ``block_size`` bytes (the last may be shorter).

    aiohttp hands out whatever has arrived, often a few KiB; the pipeline pays a thread hop per
    block, so it gets full ones.
    """
    pending = bytearray()
    while chunk := await body.read(block_size - len(pending)):
        pending += chunk
        if len(pending) == block_size:
            yield bytes(pending)
            pending.clear()
    if pending:
        yield bytes(pending)


class PartCutter:
    """Cuts a byte stream into ``part_size`` parts, hashing and counting it on the way.

    Reads one chunk past a full part before cutting it, so after each cut either bytes are
    pending or the stream is known to be over: a stream of exactly one part is one PutObject,
    and no empty part is ever uploaded. Past ``max_bytes`` it raises ObjectTooLargeError.
    """

    def __init__(
        self, chunks: AsyncIterator[bytes], max_bytes: int, key: str, part_size: int = PART_SIZE
    ) -> None:
        self._chunks = aiter(chunks)
        self._max_bytes = max_bytes
        self._key = key
        self._part_size = part_size
        self._pending = bytearray()
        self._exhausted = False
        self._digest = hashlib.sha256()
        self.size = 0

    @property
    def finished(self) -> bool:
        """Every byte of the stream has been handed out as a part."""
        return self._exhausted and not self._pending

    @property
    def sha256(self) -> str:
        return self._digest.hexdigest()

    async def next_part(self) -> bytes:
        while len(self._pending) <= self._part_size and not self._exhausted:
            await self._read_chunk()
        part = bytes(self._pending[: self._part_size])
        del self._pending[: self._part_size]
        return part

    async def _read_chunk(self) -> None:
        try:
            chunk = await anext(self._chunks)
        except StopAsyncIteration:
            self._exhausted = True
            return
        self.size += len(chunk)
        if self.size > self._max_bytes:
            raise ObjectTooLargeError(
                f"object {self._key!r} is larger than {self._max_bytes} bytes"
            )
        self._digest.update(chunk)
        self._pending += chunk
