"""Faults during a 200k-row import (catalog T02, T07, T08): `importer serve` killed with SIGKILL
at five random moments and restarted each time; every importer backend terminated three times;
PostgreSQL restarted.
Each import still ends exactly as an undisturbed one (I1-I6)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from benchmarks.generate import generate
from tests.acceptance.conftest import ROWS as CATALOG_ROWS
from tests.acceptance.conftest import Contacts, catalog_chunk_size
from tests.acceptance.invariants import Imported, assert_invariants, other_clients_digest
from tests.conftest import _free_loopback_port
from tests.jobs_support import Env, eventually, job_env, ledger_chunks, upload_job
from tests.support import fetch, import_file

pytestmark = pytest.mark.acceptance

ROWS = 200_000  # T02 in the slow tier (the bound)
SEED = 4_242
PARTITIONS = 2
CLIENT, REFERENCE_CLIENT, BYSTANDER = 41, 42, 43
DEADLINE_S = ROWS / 1000 + 60  # the catalog's bound for chaos tests


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Imported:
    path = tmp_path_factory.mktemp("faults") / "contacts.csv"
    return Imported(path, generate(ROWS, SEED, path, write_meta=False))


@pytest.fixture(scope="module")
def smaller(contacts: Contacts) -> Imported:
    """The session's catalog file (one undisturbed reference for every fault test of it)."""
    assert contacts.rows == CATALOG_ROWS
    return Imported(contacts.path, contacts.stats)


def _batches(imported: Imported) -> int:
    """Ledger rows of a whole import of the file (every partition of every chunk)."""
    return -(-imported.stats.rows // catalog_chunk_size(imported.stats.rows)) * PARTITIONS


@pytest.fixture
async def env(db_dsn: str, tmp_path: Path) -> AsyncIterator[Env]:
    """A database with a bystander client's contacts already in (I5)."""
    small = tmp_path / "bystander.csv"
    generate(2_000, SEED + 1, small, write_meta=False)
    await import_file(db_dsn, small, BYSTANDER)
    async with job_env(db_dsn, tmp_path) as opened:
        yield opened


async def _queued_job(env: Env, imported: Imported) -> uuid.UUID:
    chunk_size = catalog_chunk_size(imported.stats.rows)
    job_id = await upload_job(
        env, CLIENT, imported.path, chunk_size=chunk_size, partitions=PARTITIONS
    )
    await env.views.start_job(CLIENT, job_id, "op-1")
    return job_id


async def _serve(env: Env, log_path: Path) -> asyncio.subprocess.Process:
    environ = {
        **os.environ,
        "DATABASE_URL": env.dsn,
        "JWT_SECRET": "not-used-by-these-tests-" + "x" * 16,
        "IMPORTER_STORAGE_DIR": str(log_path.parent / "objects"),  # job_env's store
        "IMPORTER_LEASE_SECONDS": "2",
        "IMPORTER_CONCURRENCY": str(PARTITIONS),
        "IMPORTER_LOG_FORMAT": "json",
        "IMPORTER_LOG_LEVEL": "info",
    }
    environ.pop("S3_ENDPOINT_URL", None)
    port = str(_free_loopback_port())
    with log_path.open("ab") as log:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "importer", "serve", "--host", "127.0.0.1", "--port", port,
            env=environ, stderr=log, stdout=log,
        )  # fmt: skip


async def _terminal(env: Env, job_id: uuid.UUID) -> bool | None:
    rows = await fetch(env.dsn, "SELECT status FROM import_job WHERE id = $1", job_id)
    done = rows[0]["status"] in ("completed", "completed_with_placeholders", "failed")
    return True if done else None


async def _lease_expired(env: Env, job_id: uuid.UUID) -> bool | None:
    rows = await fetch(
        env.dsn,
        "SELECT coalesce(lease_expires_at <= now(), true) AS expired FROM import_job WHERE id = $1",
        job_id,
    )
    return True if rows[0]["expired"] else None


@pytest.mark.parametrize(
    "size", [pytest.param("200k", marks=pytest.mark.slow), pytest.param("catalog")]
)
async def test_serve_killed_at_five_random_moments_ends_as_an_undisturbed_import(
    env: Env, request: pytest.FixtureRequest, tmp_path: Path, size: str
) -> None:
    """T02: SIGKILL mid-import five times (at seeded random points of progress), restart."""
    imported: Imported = request.getfixturevalue("imported" if size == "200k" else "smaller")
    rng = random.Random(SEED)
    points = sorted(rng.sample(range(2, _batches(imported) * 3 // 4), 5))
    print(f"seed {SEED}: kill -9 once the ledger holds {points} batches")  # to replay
    others = await other_clients_digest(env.dsn, CLIENT)
    job_id = await _queued_job(env, imported)
    log_path = tmp_path / "serve.log"
    kills = 0
    for point in points:
        server = await _serve(env, log_path)
        try:

            async def reached(point: int = point) -> bool | None:
                if await _terminal(env, job_id):
                    return True
                return True if await ledger_chunks(env.dsn, job_id) >= point else None

            await eventually(reached, timeout_s=DEADLINE_S)
        finally:
            server.send_signal(signal.SIGKILL)
            await asyncio.wait_for(server.wait(), 30)
        if await _terminal(env, job_id):
            break
        kills += 1
        await eventually(lambda: _lease_expired(env, job_id))
    assert kills >= 4, "the import ended before most kills: make it longer"
    server = await _serve(env, log_path)
    try:
        await eventually(lambda: _terminal(env, job_id), timeout_s=DEADLINE_S)
    finally:
        server.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(server.wait(), 30) == 0
    await assert_invariants(
        env.dsn,
        job_id,
        imported,
        client=CLIENT,
        reference_client=REFERENCE_CLIENT,
        others_before=others,
    )


async def test_importer_backends_terminated_three_times_the_import_still_ends_exactly(
    env: Env, smaller: Imported, tmp_path: Path
) -> None:
    """T07: pg_terminate_backend on every importer connection, three times during the import:
    transactions roll back, batches are retried, the pool reconnects."""
    others = await other_clients_digest(env.dsn, CLIENT)
    job_id = await _queued_job(env, smaller)
    server = await _serve(env, tmp_path / "serve.log")
    terminated = []
    try:
        batches = _batches(smaller)
        for point in (batches // 8, batches // 4, batches // 2):

            async def reached(point: int = point) -> bool | None:
                if await _terminal(env, job_id):
                    return True
                return True if await ledger_chunks(env.dsn, job_id) >= point else None

            await eventually(reached, timeout_s=DEADLINE_S)
            rows = await fetch(
                env.dsn,
                "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity"
                " WHERE application_name LIKE 'importer%' AND datname = current_database()"
                " AND pid <> pg_backend_pid()",
            )
            terminated.append(rows[0]["n"])
        await eventually(lambda: _terminal(env, job_id), timeout_s=DEADLINE_S)
    finally:
        server.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(server.wait(), 30)
    assert code == 0, (tmp_path / "serve.log").read_text()[-3000:]
    assert all(n > 0 for n in terminated), terminated
    await assert_invariants(
        env.dsn,
        job_id,
        smaller,
        client=CLIENT,
        reference_client=REFERENCE_CLIENT,
        others_before=others,
    )


PG_START = "pg_ctlcluster --skip-systemctl-redirect {version} main {action}"
PG_VERSIONS = (
    [p.name for p in Path("/etc/postgresql").iterdir()] if Path("/etc/postgresql").is_dir() else []
)


async def _pg_ctl(action: str) -> None:
    assert len(PG_VERSIONS) == 1, PG_VERSIONS
    command = PG_START.format(version=PG_VERSIONS[0], action=action).split()
    if action == "restart":
        command += ["-m", "fast"]
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err


async def _pg_up(dsn: str) -> bool | None:
    try:
        await fetch(dsn, "SELECT 1")
    except (OSError, asyncpg.PostgresError):
        return None
    return True


@pytest.mark.exclusive  # restarts the PostgreSQL every test uses
async def test_a_postgresql_restart_mid_import_and_the_import_still_ends_exactly(
    env: Env, smaller: Imported, tmp_path: Path
) -> None:
    """T08: `pg_ctl restart -m fast` at ~30% of the import: every connection drops, the server
    is away a moment; batches roll back and are retried, the worker's lease and heartbeat
    recover (or the job is reclaimed), and the job is not left in `importing`."""
    others = await other_clients_digest(env.dsn, CLIENT)
    job_id = await _queued_job(env, smaller)
    log_path = tmp_path / "serve.log"
    server = await _serve(env, log_path)
    try:

        async def reached() -> bool | None:
            return True if await ledger_chunks(env.dsn, job_id) >= _batches(smaller) // 3 else None

        await eventually(reached, timeout_s=DEADLINE_S)
        try:
            await _pg_ctl("restart")
        finally:
            await eventually(lambda: _pg_up(env.dsn), timeout_s=60)
        await eventually(lambda: _terminal(env, job_id), timeout_s=DEADLINE_S)
    finally:
        if server.returncode is None:
            server.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(server.wait(), 30)
    assert code == 0, log_path.read_text()[-3000:]
    await assert_invariants(
        env.dsn,
        job_id,
        smaller,
        client=CLIENT,
        reference_client=REFERENCE_CLIENT,
        others_before=others,
    )
