"""Two `importer serve` processes on one database and one bucket: every job runs exactly once."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import Server, start_server, stop_server
from tests.api.support import counters, csv_bytes, token, upload, wait_terminal
from tests.support import cpf, fetch, finalization_counts

pytestmark = pytest.mark.api

HEADER = ("nome", "cpf")
_SHARED = ("S3_ENDPOINT_URL", "IMPORTER_BUCKET", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


@pytest.fixture
def second_server(server: Server, tmp_path: Path) -> Iterator[Server]:
    """Another instance sharing the session server's database and bucket."""
    shared = {name: server.env[name] for name in _SHARED}
    running = start_server(server.dsn, tmp_path / "serve-2.log", AWS_REGION="us-east-1", **shared)
    try:
        yield running
    finally:
        stop_server(running)


async def test_two_instances_run_each_job_exactly_once(
    http: httpx.AsyncClient,
    server: Server,
    second_server: Server,
    client_ids: itertools.count[int],
) -> None:
    jobs: dict[str, tuple[str, int]] = {}  # job id → (bearer, rows)
    for n in range(8):  # eight tenants: no fair-share waiting, four workers in two processes
        client = next(client_ids)
        bearer = token(client)
        rows = [(f"P{n}-{i}", cpf(7000 + 10 * n + i)) for i in range(n + 3)]
        created = await upload(http, bearer, csv_bytes(HEADER, rows))
        assert created.status_code == 202, created.text
        jobs[created.json()["id"]] = (bearer, len(rows))
    async with httpx.AsyncClient(base_url=second_server.url, timeout=20) as other:
        finished = await asyncio.gather(
            *(
                wait_terminal(via, bearer, job_id)
                for (job_id, (bearer, _)), via in zip(
                    jobs.items(), itertools.cycle((http, other)), strict=False
                )
            )
        )
    for job, (job_id, (_, rows)) in zip(finished, jobs.items(), strict=True):
        assert job["status"] == "completed", job
        assert counters(job)["inserted"] == rows
        assert counters(job)["rows_read"] == rows
        assert await finalization_counts(server.dsn, uuid.UUID(job_id)) == (1, 1)
    ledger = await fetch(
        server.dsn,
        "SELECT job_id, count(*) AS batches, count(DISTINCT (chunk_no, partition)) AS distinct_"
        " FROM import_chunk WHERE job_id = ANY($1::uuid[]) GROUP BY job_id",
        [uuid.UUID(j) for j in jobs],
    )
    assert len(ledger) == len(jobs)
    assert all(r["batches"] == r["distinct_"] for r in ledger)  # no batch applied twice
