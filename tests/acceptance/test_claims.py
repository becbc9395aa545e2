"""Catalog T14 at scale: two processes, eight asyncio tasks each, claim 1,000 queued jobs as fast
as they can through the workers' own claim (`PostgresJobQueue.claim_job`: `FOR UPDATE SKIP LOCKED`
under a lease). Every job is claimed exactly once, by one task of one process, and its lease
names that claimer; a task that finds nothing left gets None, never an error."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import orjson
import pytest

from importer.core.models import JobStatus
from tests.jobs_support import bare_job, job_env
from tests.support import fetch

pytestmark = pytest.mark.acceptance

JOBS = 1000
CLIENTS = 50
PROCESSES = 2
TASKS = 8
LEASE_S = 300.0

# One claiming process: TASKS tasks claim until none finds a job; prints {"owner": [ids]}.
CLAIMER = """
import asyncio, sys, orjson
from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue

async def main(dsn, name, tasks, lease):
    pool = await connect_pool(dsn, tasks)
    store = PostgresJobQueue(pool)
    claimed = {}

    async def task(owner):
        mine = claimed.setdefault(owner, [])
        while (job := await store.claim_job(owner, lease, 10_000)) is not None:
            mine.append(str(job.id))

    try:
        await asyncio.gather(*(task(f"{name}:{i}") for i in range(tasks)))
    finally:
        await pool.close()
    sys.stdout.buffer.write(orjson.dumps(claimed))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
"""


async def test_two_processes_racing_claim_each_of_a_thousand_jobs_exactly_once(
    db_dsn: str, tmp_path: Path
) -> None:
    async with job_env(db_dsn, tmp_path) as env:
        queued = {
            str(await bare_job(env, 900 + i % CLIENTS, JobStatus.QUEUED)) for i in range(JOBS)
        }
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CLAIMER,
            db_dsn,
            f"p{n}",
            str(TASKS),
            str(LEASE_S),
            stdout=asyncio.subprocess.PIPE,
        )
        for n in range(PROCESSES)
    ]
    outputs = [await asyncio.wait_for(p.communicate(), 120) for p in processes]
    assert [p.returncode for p in processes] == [0] * PROCESSES
    claims: dict[str, list[str]] = {}
    for out, _ in outputs:
        claims |= orjson.loads(out)
    every = [job for jobs in claims.values() for job in jobs]
    assert len(every) == len(set(every)) == JOBS  # each job once
    assert set(every) == queued
    per_process = [sum(len(j) for o, j in claims.items() if o.startswith(f"p{n}:")) for n in (0, 1)]
    assert all(n > 0 for n in per_process), per_process  # a real race between the two
    owners = {
        str(r["id"]): r["lease_owner"]
        for r in await fetch(db_dsn, "SELECT id, lease_owner FROM import_job")
    }
    assert all(owners[job] == owner for owner, jobs in claims.items() for job in jobs)
    assert uuid.UUID(every[0])  # ids are the jobs' own
