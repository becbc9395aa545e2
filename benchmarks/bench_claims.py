#!/usr/bin/env python3
"""The claim queue under a backlog (issue 26): claim and status latency with 100,000 waiting
jobs of 1,000 clients, in a scratch database made for the run and dropped after it.

    .venv/bin/python benchmarks/bench_claims.py                       # 100,000 jobs, 1,000 clients
    .venv/bin/python benchmarks/bench_claims.py --jobs 10000 --explain

``--dsn``: the admin DSN the scratch database is created with (default
IMPORTER_TEST_DATABASE_URL, else the machine's PostgreSQL on 127.0.0.1:5432). The jobs are
queued, oldest first, client ``i % clients``; ``--running`` clients hold a live lease on one
more job each (their waiting jobs go after the others'). Measured, each ``--samples`` times:
a worker's claim (``PostgresJobQueue.claim_job``: the claim's order, the fair-share cap, the
lease; each claim leases one more job), the status document's read of a queued job (the
``import_job_progress`` view with its queue position: ``PostgresJobViews.view_job``) and a
history page (50 jobs of one client). The target: a claim under 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import asyncpg

from importer.adapters.postgres.pool import connect_pool, migrate
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.postgres.views import PostgresJobViews
from importer.core.models import JobStatus

DEFAULT_DSN = os.environ.get(
    "IMPORTER_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)

QUEUE = """
INSERT INTO import_job (id, client_id, status, source, input_format, conflict_strategy,
                        chunk_size, partitions, created_at, updated_at)
SELECT gen_random_uuid(), 1 + i % $2, 'queued', 'bench/' || i, 'csv', 'merge', 5000, 4,
       now() - make_interval(secs => $1 - i), now()
FROM generate_series(1, $1) AS i
"""

RUNNING = """
INSERT INTO import_job (id, client_id, status, source, input_format, conflict_strategy,
                        chunk_size, partitions, lease_owner, lease_expires_at, started_at)
SELECT gen_random_uuid(), c, 'importing', 'bench/running/' || c, 'csv', 'merge', 5000, 4,
       'bench', now() + interval '1 hour', now()
FROM generate_series(1, $1) AS c
"""


def _with_database(dsn: str, name: str) -> str:
    head, _, tail = dsn.rpartition("/")
    query = tail.partition("?")[2]
    return f"{head}/{name}" + (f"?{query}" if query else "")


async def _admin(dsn: str, sql: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def _timed(step: Callable[[], Awaitable[object]], samples: int) -> list[float]:
    """Milliseconds of each of ``samples`` runs of ``step``."""
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        await step()
        times.append((time.perf_counter() - started) * 1000)
    return times


def _line(name: str, times: list[float]) -> str:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, round(len(ordered) * 0.95))]
    return (
        f"{name:<8} n={len(times):<4} p50 {statistics.median(times):7.1f} ms"
        f"  p95 {p95:7.1f} ms  max {ordered[-1]:7.1f} ms"
    )


async def _explain(pool: asyncpg.Pool, client_id: int, job_id: uuid.UUID) -> None:
    for title, sql, args in (
        ("claim's order", "SELECT * FROM import_claim_queue ORDER BY position LIMIT 1", ()),
        (
            "status",
            "SELECT * FROM import_job_progress WHERE client_id = $1 AND id = $2",
            (client_id, job_id),
        ),
    ):
        plan = await pool.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", *args)
        print(f"--- {title}")
        print("\n".join(r[0] for r in plan))


async def measure(args: argparse.Namespace, dsn: str) -> None:
    await migrate(dsn)
    pool = await connect_pool(dsn, 4)
    try:
        started = time.perf_counter()
        await pool.execute(QUEUE, args.jobs, args.clients)
        await pool.execute(RUNNING, args.running)
        await pool.execute("ANALYZE import_job")
        print(
            f"queued {args.jobs:,} jobs of {args.clients:,} clients"
            f" ({args.running} of them running one) in {time.perf_counter() - started:.1f} s"
        )
        queued = await pool.fetch(
            "SELECT client_id, id FROM import_job WHERE status = 'queued' ORDER BY random()"
            " LIMIT $1",
            args.samples,
        )
        store = PostgresJobQueue(pool)
        views = PostgresJobViews(pool)
        picks = iter(queued)

        async def claim() -> object:
            return await store.claim_job(f"bench-{uuid.uuid4().hex[:8]}", 300.0, 2)

        async def status() -> object:
            row = next(picks)
            return await views.view_job(row["client_id"], row["id"])

        async def history() -> object:
            client = random.randint(1, args.clients)
            return await views.list_jobs(
                client, user_id=None, statuses=(JobStatus.QUEUED,), before=None, limit=50
            )

        print(_line("claim", await _timed(claim, args.samples)))
        print(_line("status", await _timed(status, args.samples)))
        print(_line("history", await _timed(history, args.samples)))
        if args.explain:
            await _explain(pool, queued[0]["client_id"], queued[0]["id"])
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="admin DSN (a scratch db is made)")
    parser.add_argument("--jobs", type=int, default=100_000, help="queued jobs")
    parser.add_argument("--clients", type=int, default=1_000, help="clients they belong to")
    parser.add_argument("--running", type=int, default=100, help="clients running an import")
    parser.add_argument("--samples", type=int, default=100, help="measurements of each")
    parser.add_argument("--explain", action="store_true", help="the plans, with their times")
    args = parser.parse_args()
    name = f"importer_bench_claims_{uuid.uuid4().hex[:8]}"
    asyncio.run(_admin(args.dsn, f'CREATE DATABASE "{name}"'))
    try:
        asyncio.run(measure(args, _with_database(args.dsn, name)))
    finally:
        asyncio.run(_admin(args.dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


if __name__ == "__main__":
    main()
