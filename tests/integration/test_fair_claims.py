"""Fair claims on the real PostgreSQL, with two real workers, three clients and five jobs.

A client whose import runs holds its turn (one import of a client applies at a time): a worker
that claimed its second job would only wait on that turn. While other clients' jobs wait,
the workers pass such a job over, and a queued job's ``queue_position`` is its place in the
order the claim goes by. The file reads are gated per client (the object store waits before
the first block), so each job runs exactly as long as the test lets it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.postgres.views import PostgresJobViews
from importer.adapters.storage.local import LocalObjectStore
from importer.services.documents import job_document
from importer.services.imports import utc_now
from importer.services.worker import Worker
from importer.settings import Settings
from tests.jobs_support import WAIT_S, Env, contacts_csv, eventually, job_env, upload_job
from tests.support import fetch

pytestmark = pytest.mark.integration


class GatedObjects(LocalObjectStore):
    """The local store, whose reads of a client's files wait until that client's gate opens."""

    def __init__(self, root: Path, gates: dict[int, asyncio.Event]) -> None:
        super().__init__(root)
        self.gates = gates

    async def blocks(
        self, key: str, block_size: int, *, pinned: str | None = None, start: int = 0
    ) -> AsyncIterator[bytes]:
        await self.gates[int(key.split("/", 1)[0])].wait()
        async for block in super().blocks(key, block_size, pinned=pinned, start=start):
            yield block


@pytest.fixture
async def env(db_dsn: str, tmp_path: Path) -> AsyncIterator[Env]:
    async with job_env(db_dsn, tmp_path) as opened:
        yield opened


async def claimed(dsn: str, jobs: dict[str, uuid.UUID]) -> set[str]:
    """The jobs a live lease holds (claimed, running or waiting)."""
    rows = await fetch(
        dsn,
        "SELECT id FROM import_job WHERE id = ANY($1::uuid[]) AND lease_expires_at > now()"
        " AND status NOT IN ('completed', 'completed_with_placeholders', 'failed', 'cancelled')",
        list(jobs.values()),
    )
    ids = {row["id"] for row in rows}
    return {name for name, job_id in jobs.items() if job_id in ids}


async def statuses(dsn: str, jobs: dict[str, uuid.UUID]) -> dict[str, str]:
    rows = await fetch(
        dsn, "SELECT id, status FROM import_job WHERE id = ANY($1::uuid[])", list(jobs.values())
    )
    by_id = {row["id"]: row["status"] for row in rows}
    return {name: by_id[job_id] for name, job_id in jobs.items()}


async def positions(
    views: PostgresJobViews, owners: dict[str, int], jobs: dict[str, uuid.UUID]
) -> dict[str, object]:
    """Each job's queue_position as the status document shows it."""
    shown: dict[str, object] = {}
    for name, job_id in jobs.items():
        document = job_document(await views.view_job(owners[name], job_id), utc_now())
        shown[name] = document["queue_position"]
    return shown


async def until_claimed(dsn: str, jobs: dict[str, uuid.UUID], expected: set[str]) -> None:
    """Wait until as many jobs as expected are claimed (and a beat more), then compare."""

    async def enough() -> set[str] | None:
        now = await claimed(dsn, jobs)
        return now if len(now) >= len(expected) else None

    await eventually(enough)
    await asyncio.sleep(0.3)  # a wrong extra claim would have happened by now (polls: 50 ms)
    assert await claimed(dsn, jobs) == expected


COMPLETED = {"completed", "completed_with_placeholders"}  # a client's 2nd import: no new field


async def until_completed(dsn: str, jobs: dict[str, uuid.UUID], name: str) -> None:
    async def reached() -> bool | None:
        return (await statuses(dsn, jobs))[name] in COMPLETED or None

    await eventually(reached)


async def test_a_busy_client_s_second_job_waits_while_other_clients_jobs_are_claimed(
    env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    a, b, c = next(client_ids), next(client_ids), next(client_ids)
    owners = {"a1": a, "a2": a, "b1": b, "c1": c, "c2": c}
    jobs: dict[str, uuid.UUID] = {}
    for n, (name, client) in enumerate(owners.items()):  # created in this order
        path = contacts_csv(tmp_path / f"{name}.csv", 30, first=n * 1000)
        jobs[name] = await upload_job(env, client, path, chunk_size=10, partitions=2)
        await env.views.start_job(client, jobs[name], f"start:{name}")

    # Nothing runs: each client's first job, oldest first, then the clients' later jobs.
    assert await positions(env.views, owners, jobs) == {
        "a1": 1, "a2": 4, "b1": 2, "c1": 3, "c2": 5
    }  # fmt: skip

    gates = {client: asyncio.Event() for client in (a, b, c)}
    objects = GatedObjects(tmp_path / "objects", gates)
    settings = Settings(database_url=env.dsn, lease_seconds=30.0, worker_poll_seconds=0.05)
    assert settings.max_imports_per_client == 2  # the cap would let A's second job in
    stop = asyncio.Event()
    pools = [await connect_pool(env.dsn, 8) for _ in range(2)]
    stores = [PostgresJobQueue(pool, dsn=env.dsn) for pool in pools]
    workers = [
        asyncio.create_task(
            Worker(
                store, objects, settings, owner=f"w{i}", stop=stop, local_files=LocalObjectStore
            ).run(),
            name=f"w{i}",
        )
        for i, store in enumerate(stores)
    ]
    try:
        # A's first job runs (its read held at the gate); the other worker takes B's, not A's
        # second (older than B's, but it would only wait for A's turn).
        await until_claimed(env.dsn, jobs, {"a1", "b1"})
        assert await positions(env.views, owners, jobs) == {
            "a1": None, "a2": 2, "b1": None, "c1": 1, "c2": 3
        }  # fmt: skip
        shown = job_document(await env.views.view_job(a, jobs["a1"]), utc_now())
        assert (shown["status"], shown["phase"]) == ("normalizing", "reading")

        # B's ends: C's first job goes next, still not A's second.
        gates[b].set()
        await until_completed(env.dsn, jobs, "b1")
        await until_claimed(env.dsn, jobs, {"a1", "c1"})
        assert await positions(env.views, owners, jobs) == {
            "a1": None, "a2": 1, "b1": None, "c1": None, "c2": 2
        }  # fmt: skip

        # C's first ends: C runs nothing now, so its second goes before A's.
        gates[c].set()
        await until_completed(env.dsn, jobs, "c2")
        assert (await statuses(env.dsn, jobs))["a1"] == "normalizing"  # still running

        # Only A's second waits: a free worker may take it (up to the cap); it waits its turn.
        await until_claimed(env.dsn, jobs, {"a1", "a2"})
        assert (await statuses(env.dsn, jobs))["a2"] == "queued"
        gates[a].set()
        for name in jobs:
            await until_completed(env.dsn, jobs, name)
    finally:
        stop.set()
        for gate in gates.values():
            gate.set()
        await asyncio.wait_for(asyncio.gather(*workers, return_exceptions=True), WAIT_S)
        for store, pool in zip(stores, pools, strict=True):
            await store.close()
            await pool.close()

    rows = await fetch(
        env.dsn,
        "SELECT id, started_at, finished_at FROM import_job WHERE id = ANY($1::uuid[])",
        list(jobs.values()),
    )
    times = {row["id"]: (row["started_at"], row["finished_at"]) for row in rows}
    # A's imports ran one after the other; B's and C's both ended while A's first ran.
    assert times[jobs["a2"]][0] >= times[jobs["a1"]][1]
    for name in ("b1", "c1", "c2"):
        assert times[jobs[name]][1] <= times[jobs["a1"]][1]
    assert all(document is None for document in (await positions(env.views, owners, jobs)).values())
    assert set((await statuses(env.dsn, jobs)).values()) <= COMPLETED
