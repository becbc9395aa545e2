"""The claim and the queue position without numbering the queue (issue 26), against their
specification, the ``import_claim_queue`` view (its ``position``), on random queues: clients
with and without a running import, several waiting jobs each, a preview resting, a
command-line job; each claim takes the view's first claimable job, and every queued job's
``queue_position`` (the status document's) is the view's."""

from __future__ import annotations

import random
import uuid

import asyncpg
import pytest

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.postgres.views import PostgresJobViews
from importer.sql import queries

pytestmark = pytest.mark.integration

CAP = 2  # IMPORTER_MAX_IMPORTS_PER_CLIENT

INSERT = (
    "INSERT INTO import_job (id, client_id, status, source, input_format, conflict_strategy,"
    " chunk_size, partitions, created_at, lease_owner, lease_expires_at, in_process,"
    " awaiting_apply) VALUES ($1, $2, $3, 'x', 'csv', 'merge', 10, 1,"
    " now() - make_interval(secs => $4), $5, now() + make_interval(secs => $6), $7, $8)"
)


async def _random_queue(pool: asyncpg.Pool, rng: random.Random) -> None:
    for n in range(60):
        client = rng.randint(1, 6)
        kind = rng.choices(["queued", "running", "expired", "preview", "cli"], [8, 2, 1, 1, 1])[0]
        status = "importing" if kind in ("running", "expired") else "queued"
        if kind == "preview":
            status = "ready"
        lease_s = {"running": 600, "expired": -5, "cli": 600}.get(kind)
        await pool.execute(
            INSERT,
            uuid.uuid4(),
            client,
            status,
            float(1000 - n + rng.random()),
            "w" if lease_s is not None else None,
            float(lease_s) if lease_s is not None else None,
            kind == "cli",
            kind == "preview",
        )


async def _expected(pool: asyncpg.Pool) -> uuid.UUID | None:
    """The view's first job whose client holds fewer than CAP live leases."""
    return await pool.fetchval(
        "SELECT id FROM import_claim_queue WHERE leases < $1 ORDER BY position LIMIT 1", CAP
    )


@pytest.mark.parametrize("seed", range(4))
async def test_claims_and_positions_follow_the_views_order(db_dsn: str, seed: int) -> None:
    pool = await connect_pool(db_dsn, 2)
    try:
        await _random_queue(pool, random.Random(seed))
        store, views = PostgresJobQueue(pool), PostgresJobViews(pool)
        for _ in range(12):
            positions = await pool.fetch(
                "SELECT q.id, q.client_id, q.position FROM import_claim_queue q"
                " JOIN import_job j ON j.id = q.id WHERE j.status = 'queued'"
            )
            for row in positions:
                view = await views.view_job(row["client_id"], row["id"])
                assert view.queue_position == row["position"], row
            expected = await _expected(pool)
            claimed = await store.claim_job(f"w{seed}", 600.0, CAP)
            assert (claimed.id if claimed is not None else None) == expected
    finally:
        await pool.close()


async def test_neither_the_claim_nor_a_status_numbers_the_whole_queue(db_dsn: str) -> None:
    """With 100,000 waiting jobs numbering them all (a window over the queue) cost a claim and a
    status half a second (benchmarks/bench_claims.py); their plans have no window left."""
    pool = await connect_pool(db_dsn, 1)
    try:
        await pool.execute(
            "INSERT INTO import_job (id, client_id, status, source, input_format,"
            " conflict_strategy, chunk_size, partitions, created_at)"
            " SELECT gen_random_uuid(), 1 + i % 50, 'queued', 'x', 'csv', 'merge', 10, 1,"
            " now() - make_interval(secs => 5000 - i) FROM generate_series(1, 5000) AS i"
        )
        await pool.execute("ANALYZE import_job")
        job = await pool.fetchrow("SELECT id, client_id FROM import_job LIMIT 1")
        claim, status = queries()["claim_job"], queries()["view_job"]
        claimable = ["importing", "normalizing", "queued", "ready"]
        texts = [
            "\n".join(r[0] for r in await pool.fetch(f"EXPLAIN {query}", *args))
            for query, args in (
                (claim, ("w", 60.0, 2, claimable)),
                (status, (job["client_id"], job["id"])),
            )
        ]
        for text in texts:
            assert "WindowAgg" not in text, text
    finally:
        await pool.close()
