"""Graceful shutdown mid-import (catalog T32): SIGTERM to `importer serve`, then a restart.

`importer serve` (the process deploy/importer.service runs) imports the generated contacts file,
uploaded through the HTTP API, slowed by a failpoint (a pause after every batch's commit). Once
the ledger holds some of its batches but not all, the process gets SIGTERM: it must drain and
exit 0 within a bound, its in-flight batches committed, no ledger row left half-done, the job
left non-terminal and its lease released (the next claim need not wait for it to expire). A
second `importer serve` on the same database and storage then claims the job at once, applies
exactly the batches the ledger lacked, and the job ends as an undisturbed import of the same file
would (I1-I4, I6, ``_assert_invariants``); another client holding the same keys is untouched (I5).

Both modes: one instance (batches applied in the process), and multi-instance over RabbitMQ
(chunk messages on this test's own queues), where the deliveries in hand at the drain are
committed and the rest stay queued; the restarted coordinator re-publishes what its ledger lacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import itertools
import random
import signal
import subprocess
import time
import uuid
from pathlib import Path

import aio_pika
import httpx
import pytest

from importer.adapters.rabbit.broker import Topology
from importer.core.models import TERMINAL_STATUSES, JobStatus
from tests.acceptance.conftest import RABBITMQ_URL, ROWS, SEED, Contacts
from tests.acceptance.test_crash_resume import (
    BATCHES,
    CHUNK_SIZE,
    CLIENT,
    PARTITIONS,
    _assert_invariants,
    _events,
    _log_tail,
)
from tests.api.conftest import Server, start_server
from tests.api.support import token, upload, wait_terminal
from tests.jobs_support import eventually, ledger_chunks
from tests.support import db_state, fetch, import_file

pytestmark = pytest.mark.acceptance

# SIGTERM to exit: in-flight batches (a few, 50 ms apart at most) and no open request. Far below
# the unit's TimeoutStopSec, which also covers uvicorn's wait for open requests.
DRAIN_BOUND_S = 20.0
# The catalog's bound for a job to end after a fault: rows/1000 + 60 s.
RESUME_TIMEOUT_S = ROWS / 1000 + 60
# Every batch waits 50 ms after its commit: 40 batches on 2 partitions take a second or more, so
# the SIGTERM lands mid-import.
SLOW_BATCHES = "after_commit=sleep:50"
BYSTANDER = 33  # CLIENT's and REFERENCE_CLIENT's neighbour
MODES = [
    pytest.param("one_instance"),
    pytest.param("multi_instance", marks=pytest.mark.rabbitmq),
]


@pytest.fixture(params=MODES)
def broker(request: pytest.FixtureRequest) -> str | None:
    """Multi-instance mode: this test's queue prefix (``prefix``, queues deleted at the end);
    one instance: None. A plain fixture: it sets the async one up outside the test's loop."""
    if request.param == "one_instance":
        return None
    prefix: str = request.getfixturevalue("prefix")
    return prefix


async def test_sigterm_mid_import_drains_and_a_restarted_server_finishes_the_job(
    db_dsn: str, tmp_path: Path, contacts: Contacts, broker: str | None
) -> None:
    prefix = broker
    mode = "one_instance" if prefix is None else "multi_instance"
    env = _server_env(tmp_path, prefix)
    done_before_term = random.Random(SEED).randint(BATCHES // 8, BATCHES // 3)
    print(f"seed {SEED}: SIGTERM once {done_before_term} batches are done")  # to replay a failure
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    # I5: another client with some of the same keys, imported before; untouched by all that
    # follows.
    await import_file(db_dsn, _head(contacts.path, tmp_path / "head.csv", 2000), BYSTANDER)
    bystander = await db_state(db_dsn, BYSTANDER)

    slow = env | {"IMPORTER_FAILPOINTS": SLOW_BATCHES}
    first = await asyncio.to_thread(start_server, db_dsn, first_log, **slow)
    try:
        job_id = await _upload(first, contacts)

        async def enough_done() -> int | None:
            done = await ledger_chunks(db_dsn, job_id)
            return done if done >= done_before_term else None

        await eventually(enough_done)
        first.process.send_signal(signal.SIGTERM)
        drain_s = await _exits_zero(first, DRAIN_BOUND_S)
    finally:
        _kill(first)
    print(f"{mode}: drained in {drain_s:.2f} s")

    # The drain: the job left for a later run, its lease released, its ledger whole.
    done = await ledger_chunks(db_dsn, job_id)
    assert done_before_term <= done < BATCHES, done
    job = (
        await fetch(
            db_dsn,
            "SELECT status, coalesce(lease_expires_at <= now(), true) AS released"
            " FROM import_job WHERE id = $1",
            job_id,
        )
    )[0]
    assert JobStatus(job["status"]) not in TERMINAL_STATUSES, job
    assert job["released"], job
    assert not await _unfinished_ledger_rows(db_dsn, job_id)
    events = _events(first_log)
    names = [e["event"] for e in events]
    assert "workers_drained" in names, _log_tail(first_log)
    assert "worker_stopped" in names, _log_tail(first_log)
    endings = [(e["job_id"], e["ending"]) for e in events if e["event"] == "job_finished"]
    assert endings == [(str(job_id), "released")], endings
    # Every batch the ledger holds was applied (and reported) by the first process: none lost.
    assert _applied(events) == done

    second = await asyncio.to_thread(start_server, db_dsn, second_log, **env)
    try:
        async with httpx.AsyncClient(base_url=second.url, timeout=20) as http:
            final = await wait_terminal(http, token(CLIENT), str(job_id), RESUME_TIMEOUT_S)
        second.process.send_signal(signal.SIGTERM)
        await _exits_zero(second, DRAIN_BOUND_S)
    finally:
        _kill(second)
    print(f"{mode}: {done} batches before SIGTERM, {BATCHES - done} after the restart")

    assert final["status"] in {s.value for s in TERMINAL_STATUSES}
    events = _events(second_log)
    claims = [e["job_id"] for e in events if e["event"] == "job_claimed"]
    assert claims == [str(job_id)]
    # Exactly the batches the ledger lacked were applied again (a repeat is a ledger no-op).
    assert _applied(events) == BATCHES - done
    await _assert_invariants(db_dsn, job_id, contacts)  # I1-I4, I6
    assert await db_state(db_dsn, BYSTANDER) == bystander  # I5
    if prefix is not None:
        assert await _dead_letters(prefix) == 0


# --- helpers ----------------------------------------------------------------------------------


def _server_env(tmp_path: Path, prefix: str | None) -> dict[str, str]:
    """What both servers share: the database (start_server's), the storage, the job's shape."""
    env = {
        "IMPORTER_STORAGE_DIR": str(tmp_path / "objects"),
        "S3_ENDPOINT_URL": "",  # the local storage, whatever the caller's environment says
        "IMPORTER_MAX_UPLOAD_BYTES": str(64 * 1024 * 1024),
        "IMPORTER_CHUNK_SIZE": str(CHUNK_SIZE),
        "IMPORTER_CONCURRENCY": str(PARTITIONS),
        "IMPORTER_LEASE_SECONDS": "2",
        # One worker: a lease lost to a stalled heartbeat is not taken over by a sibling.
        "IMPORTER_WORKERS": "1",
        "IMPORTER_LOG_FORMAT": "json",
        "IMPORTER_LOG_LEVEL": "info",
        "IMPORTER_FAILPOINTS": "",
        "RABBITMQ_URL": "",  # one instance unless this test's broker is given
    }
    if prefix is not None:
        env |= {
            "RABBITMQ_URL": RABBITMQ_URL,
            "IMPORTER_QUEUE_PREFIX": prefix,
            "IMPORTER_RETRY_DELAY_MS": "1000",
        }
    return env


def _head(path: Path, out: Path, records: int) -> Path:
    """The header and the first ``records`` records of a CSV file (quoted newlines kept)."""
    with path.open(newline="", encoding="utf-8") as source, out.open("w", newline="") as sink:
        writer = csv.writer(sink)
        for row in itertools.islice(csv.reader(source), records + 1):
            writer.writerow(row)
    return out


async def _upload(server: Server, contacts: Contacts) -> uuid.UUID:
    """The user's way: a multipart upload, which stores the file and queues the job."""
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        response = await upload(http, token(CLIENT), contacts.path.read_bytes())
    assert response.status_code == 202, response.text
    assert response.json()["status"] == JobStatus.QUEUED.value
    return uuid.UUID(response.json()["id"])


async def _exits_zero(server: Server, bound_s: float) -> float:
    """Seconds until the signalled server exited, which it must do with 0 within ``bound_s``."""
    started = time.monotonic()
    try:
        code = await asyncio.to_thread(server.process.wait, bound_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"no exit {bound_s} s after SIGTERM: {_log_tail(server.log)}")
    assert code == 0, (code, _log_tail(server.log))
    return time.monotonic() - started


def _kill(server: Server) -> None:
    """SIGKILL a server still alive (a failed assertion): never leave a process behind."""
    if server.process.poll() is None:
        server.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.process.wait(timeout=10)


def _applied(events: list[dict[str, object]]) -> int:
    """Batches this process committed (a repeat found the ledger row and changed nothing)."""
    return sum(e["event"] == "chunk_applied" and e["repeated"] is False for e in events)


async def _unfinished_ledger_rows(dsn: str, job_id: uuid.UUID) -> list[object]:
    return await fetch(
        dsn,
        "SELECT chunk_no, partition, part, status FROM import_chunk"
        " WHERE job_id = $1 AND status NOT IN ('done', 'discarded')",
        job_id,
    )


async def _dead_letters(prefix: str) -> int:
    connection = await aio_pika.connect(RABBITMQ_URL)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(Topology.named(prefix).dead, passive=True)
        return int(queue.declaration_result.message_count or 0)
