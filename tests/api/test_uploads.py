"""Uploads: presigned PUT to S3, the server's own upload URL, checksums and size limits."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import boto3
import httpx
import pytest

from tests.api.conftest import Server
from tests.api.support import (
    LGPD,
    MAX_UPLOAD_BYTES,
    auth,
    counters,
    csv_bytes,
    sha256,
    token,
    upload,
    wait_terminal,
)
from tests.support import cpf

pytestmark = pytest.mark.api

HEADER = ("nome", "cpf")


def announce(content: bytes, *, filename: str = "big.csv", digest: str | None = None) -> dict:
    return {
        "filename": filename,
        "size": len(content),
        "sha256": digest or sha256(content),
        "conflict_strategy": "discard",
        **LGPD,
    }


def bucket_keys(server: Server, prefix: str) -> list[str]:
    s3 = boto3.client(
        "s3",
        endpoint_url=server.env["S3_ENDPOINT_URL"],
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    )
    listed = s3.list_objects_v2(Bucket=server.env["IMPORTER_BUCKET"], Prefix=prefix)
    return [item["Key"] for item in listed.get("Contents", [])]


async def test_presigned_upload_then_uploaded_then_start(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    bearer = token(client)
    content = csv_bytes(HEADER, [(f"U{i}", cpf(1100 + i)) for i in range(5)])
    created = await http.post("/v1/uploads", json=announce(content), headers=auth(bearer))
    assert created.status_code == 201, created.text
    job, target = created.json()["job"], created.json()["upload"]
    assert job["status"] == "uploading"
    assert target["presigned"] is True
    assert target["method"] == "PUT"
    assert urlsplit(target["url"]).netloc == urlsplit(server.env["S3_ENDPOINT_URL"]).netloc
    early = await http.post(f"/v1/imports/{job['id']}/start", headers=auth(bearer))
    assert early.status_code == 409
    assert early.json()["error"] == "not_uploaded"
    missing = await http.post(f"/v1/imports/{job['id']}/uploaded", headers=auth(bearer))
    assert missing.status_code == 409
    assert missing.json()["error"] == "upload_missing"
    async with httpx.AsyncClient(timeout=20) as direct:  # browser → object store, no token
        put = await direct.put(target["url"], content=content)
    assert put.status_code == 200, put.text
    confirmed = await http.post(f"/v1/imports/{job['id']}/uploaded", headers=auth(bearer))
    assert confirmed.status_code == 200, confirmed.text
    assert confirmed.json()["status"] == "uploaded"
    again = await http.post(f"/v1/imports/{job['id']}/uploaded", headers=auth(bearer))
    assert again.json()["status"] == "uploaded"  # a repeat changes nothing
    started = await http.post(f"/v1/imports/{job['id']}/start", headers=auth(bearer))
    assert started.status_code == 202
    assert started.json()["status"] == "queued"
    done = await wait_terminal(http, bearer, job["id"])
    assert done["status"] == "completed"
    assert counters(done)["inserted"] == 5
    assert bucket_keys(server, f"{client}/") == [f"{client}/{job['id']}/big.csv"]


async def test_wrong_sha256_fails_the_job_with_checksum_mismatch(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    content = csv_bytes(HEADER, [("W", cpf(1200))])
    body = announce(content, digest=sha256(b"something else"))
    created = (await http.post("/v1/uploads", json=body, headers=auth(bearer))).json()
    async with httpx.AsyncClient(timeout=20) as direct:
        await direct.put(created["upload"]["url"], content=content)
    confirmed = await http.post(
        f"/v1/imports/{created['job']['id']}/uploaded", headers=auth(bearer)
    )
    assert confirmed.status_code == 200
    assert confirmed.json()["status"] == "failed"
    assert confirmed.json()["fail_reason"] == "checksum_mismatch"
    start = await http.post(f"/v1/imports/{created['job']['id']}/start", headers=auth(bearer))
    assert start.status_code == 409


async def test_announce_validation_and_size_limit(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    bad = await http.post("/v1/uploads", json={"size": -1, "sha256": "nope"}, headers=auth(bearer))
    assert bad.status_code == 400
    assert {"filename", "size", "sha256", "conflict_strategy"} <= {p["field"] for p in bad.json()}
    huge = announce(b"x", filename="huge.csv") | {"size": MAX_UPLOAD_BYTES + 1}
    too_large = await http.post("/v1/uploads", json=huge, headers=auth(bearer))
    assert too_large.status_code == 413
    assert too_large.json()["error"] == "too_large"


async def test_server_upload_url_when_storage_has_no_presigned_put(
    local_server: Server, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    content = csv_bytes(HEADER, [(f"L{i}", cpf(1300 + i)) for i in range(3)])
    async with httpx.AsyncClient(base_url=local_server.url, timeout=20) as http:
        created = await http.post("/v1/uploads", json=announce(content), headers=auth(bearer))
        assert created.status_code == 201, created.text
        job, target = created.json()["job"], created.json()["upload"]
        assert target["presigned"] is False
        assert target["url"] == f"{local_server.url}/v1/uploads/{job['id']}"
        anonymous = await http.put(target["url"], content=content)
        assert anonymous.status_code == 401
        too_big = await http.put(target["url"], content=content + b"x", headers=auth(bearer))
        assert too_big.status_code == 413  # larger than the sealed size, by Content-Length
        put = await http.put(target["url"], content=content, headers=auth(bearer))
        assert put.status_code == 200, put.text
        assert put.json()["sha256"] == sha256(content)
        confirmed = await http.post(f"/v1/imports/{job['id']}/uploaded", headers=auth(bearer))
        assert confirmed.json()["status"] == "uploaded"
        late_put = await http.put(target["url"], content=content, headers=auth(bearer))
        assert late_put.status_code == 409  # the upload is sealed once confirmed
        await http.post(f"/v1/imports/{job['id']}/start", headers=auth(bearer))
        done = await wait_terminal(http, bearer, job["id"])
        assert done["status"] == "completed"
        assert counters(done)["inserted"] == 3


async def test_413_from_content_length_before_the_body_is_read(
    server: Server, client_ids: itertools.count[int]
) -> None:
    """Headers only, no body: the answer must come without the server waiting for bytes."""
    bearer = token(next(client_ids))
    host, port = urlsplit(server.url).hostname, urlsplit(server.url).port
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            (
                "POST /v1/imports HTTP/1.1\r\n"
                f"Host: {host}:{port}\r\n"
                f"Authorization: Bearer {bearer}\r\n"
                "Content-Type: multipart/form-data; boundary=xyz\r\n"
                "Content-Length: 10000000000\r\n"
                "Expect: 100-continue\r\n\r\n"
            ).encode()
        )
        await writer.drain()
        async with asyncio.timeout(10):
            status_line = await reader.readline()
            head = await reader.readuntil(b"\r\n\r\n")
    finally:
        writer.close()
    assert status_line.split()[1] == b"413", status_line + head
    assert b"application/json" in head


async def test_413_when_the_streamed_body_grows_past_the_limit(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    """No Content-Length (chunked): the limit is enforced while streaming; nothing is kept."""
    client = next(client_ids)
    bearer = token(client)
    boundary = "limitboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.csv"\r\n'
        "Content-Type: text/csv\r\n\r\nnome,cpf\r\n"
    ).encode()

    async def body() -> AsyncIterator[bytes]:
        yield head
        for _ in range((MAX_UPLOAD_BYTES + 32 * 1024) // 8192):
            yield b"A," + b"1" * 8188 + b"\r\n"

    response = await http.post(
        "/v1/imports",
        content=body(),
        headers={**auth(bearer), "Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert response.status_code == 413, response.text
    assert response.json()["error"] == "too_large"
    assert bucket_keys(server, f"{client}/") == []
    history = await http.get("/v1/imports", headers=auth(bearer))
    assert history.json()["items"] == []


async def test_empty_file_is_refused_and_not_kept(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    response = await upload(http, token(client), b"")
    assert response.status_code == 400
    assert response.json() == [{"field": "file", "message": "is empty"}]
    assert bucket_keys(server, f"{client}/") == []
