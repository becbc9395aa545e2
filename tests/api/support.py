"""Helpers of the API tier: tokens, forms, and waiting for a job with a deadline."""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import time
from collections.abc import Callable, Sequence

import httpx

from importer.core.principals import Permission, Principal
from importer.http.auth import mint_token

SECRET = "api-tier-secret-" + "x" * 32
# Small enough that the 413 tests stay fast; every other test's file is far smaller.
MAX_UPLOAD_BYTES = 64 * 1024
CREATE = Permission.CONTACT_IMPORT_CREATE
HSM = Permission.HSM_CREATE
ADMIN = Permission.IMPORT_ADMIN
TERMINAL = {"completed", "completed_with_placeholders", "failed", "cancelled"}
JOB_TIMEOUT_S = 30.0

LGPD = {
    "has_sensitive_data": "false",
    "has_underage_data": "false",
    "data_processing_purpose": "marketing",
    "lgpd_processing_hypothesis": "1",
}


def token(
    client_id: int,
    user_id: str = "ana",
    permissions: Sequence[Permission] = (CREATE,),
    *,
    ttl_s: int = 600,
    now: float | None = None,
) -> str:
    principal = Principal(user_id, client_id, frozenset(permissions))
    return mint_token(principal, ttl_s=ttl_s, secret=SECRET, now=now)


def auth(bearer: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {bearer}"}


def csv_bytes(header: Sequence[str], rows: Sequence[Sequence[str]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue().encode("utf-8")


def sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


async def upload(
    http: httpx.AsyncClient,
    bearer: str,
    content: bytes,
    filename: str = "contacts.csv",
    *,
    path: str = "/v1/imports",
    **fields: str,
) -> httpx.Response:
    """POST a multipart import: the file plus the LGPD fields, merge unless told otherwise."""
    data = {"conflict_strategy": "merge", **LGPD, **fields}
    files = {"file": (filename, content, "text/csv")}
    return await http.post(path, data=data, files=files, headers=auth(bearer))


async def wait_terminal(
    http: httpx.AsyncClient, bearer: str, job_id: str, timeout_s: float = JOB_TIMEOUT_S
) -> dict[str, object]:
    """Poll the job until it ends (a deadline, never a fixed sleep to synchronize)."""
    return await wait_until(http, bearer, job_id, lambda job: job["status"] in TERMINAL, timeout_s)


async def wait_until(
    http: httpx.AsyncClient,
    bearer: str,
    job_id: str,
    done: Callable[[dict[str, object]], bool],
    timeout_s: float = JOB_TIMEOUT_S,
) -> dict[str, object]:
    """Poll the job until ``done`` says so, within a deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = await http.get(f"/v1/imports/{job_id}", headers=auth(bearer))
        assert response.status_code == 200, response.text
        job: dict[str, object] = response.json()
        if done(job):
            return job
        assert time.monotonic() < deadline, f"job still {job['status']}: {job}"
        await asyncio.sleep(0.05)


def counters(job: dict[str, object]) -> dict[str, int]:
    found = job["counters"]
    assert isinstance(found, dict)
    return found
