"""Catalog T33: a lock held elsewhere during the import. Another session holds `contact` in
EXCLUSIVE mode for a while (writes wait); with IMPORTER_LOCK_TIMEOUT_MS short, the batches that
meet it fail, are retried with backoff and, still blocked, are discarded with the reason; the
others land; the job terminates with every row accounted for (I1) and the lost rows reported."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import asyncpg
import pytest

from tests.acceptance.conftest import Contacts
from tests.acceptance.test_crash_resume import (
    CLIENT,
    DEADLINE_S,
    _events,
    _is_terminal,
    _log_tail,
    _logged,
    _queued_job,
)
from tests.jobs_support import WAIT_S, Env, eventually, job_env, ledger_chunks
from tests.support import fetch, finalization_counts

pytestmark = pytest.mark.acceptance

HOLD_S = 4.0  # longer than a batch's 4 attempts at a 300 ms lock timeout with backoff


async def _worker(env: Env, log_path: Path) -> asyncio.subprocess.Process:
    environ = {
        **os.environ,
        "DATABASE_URL": env.dsn,
        "IMPORTER_STORAGE_DIR": str(log_path.parent / "objects"),
        "IMPORTER_CONCURRENCY": "2",
        "IMPORTER_LOCK_TIMEOUT_MS": "300",
        "IMPORTER_LOG_FORMAT": "json",
        "IMPORTER_LOG_LEVEL": "info",
        "IMPORTER_FAILPOINTS": "after_commit=sleep:100",  # slow enough to meet the lock
    }
    environ.pop("S3_ENDPOINT_URL", None)
    with log_path.open("wb") as log:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "importer", "worker", env=environ, stderr=log
        )


async def test_a_held_lock_makes_batches_retry_then_discard_and_the_job_still_ends(
    db_dsn: str, tmp_path: Path, contacts: Contacts
) -> None:
    log = tmp_path / "worker.log"
    async with job_env(db_dsn, tmp_path) as env:
        worker = await _worker(env, log)
        try:
            await eventually(lambda: _logged(log, "worker_started"))
            job_id = await _queued_job(env, contacts)

            async def started() -> bool | None:
                return True if await ledger_chunks(db_dsn, job_id) >= 4 else None

            await eventually(started)
            blocker = await asyncpg.connect(db_dsn)
            try:
                async with blocker.transaction():
                    await blocker.execute("LOCK TABLE contact IN EXCLUSIVE MODE")
                    await asyncio.sleep(HOLD_S)
            finally:
                await blocker.close()

            async def finished() -> bool | None:
                return True if await _is_terminal(env, job_id) else None

            await eventually(finished, timeout_s=DEADLINE_S)
        finally:
            worker.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(worker.wait(), WAIT_S)
        job = await env.views.view_job(CLIENT, job_id)
    assert code == 0, _log_tail(log)
    counters = job.counters
    assert counters.balanced  # I1
    assert counters.rows_read == contacts.rows
    discarded = await fetch(
        db_dsn,
        "SELECT error, rows_read, invalid, attempts, error_message FROM import_chunk"
        " WHERE job_id = $1 AND status = 'discarded'",
        job_id,
    )
    assert discarded, "no batch met the lock"
    assert all(r["attempts"] == 4 for r in discarded)
    assert all("lock" in r["error_message"].lower() for r in discarded)
    assert counters.error == sum(r["error"] for r in discarded) > 0
    reported = await fetch(
        db_dsn,
        "SELECT count(*) AS n FROM import_row_error"
        " WHERE job_id = $1 AND reason = 'chunk_discarded'",
        job_id,
    )
    assert reported[0]["n"] == counters.error  # each lost row in the report, with its line
    assert await finalization_counts(db_dsn, job_id) == (1, 1)
    assert not await fetch(  # I2
        db_dsn, "SELECT client_id, cpf_cnpj FROM contact GROUP BY 1, 2 HAVING count(*) > 1"
    )
    retries = [e for e in _events(log) if e["event"] == "batch_retry"]
    assert retries  # retried before being given up
