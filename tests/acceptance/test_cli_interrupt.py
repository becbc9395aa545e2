"""An interrupted `importer import` (catalog T36) ends truthfully and is resumed.

SIGINT once the ledger holds a seeded number of batches: the CLI lets its in-flight batches
commit, finalizes the job ``cancelled`` with the ledger's counters and exits 130; `importer job
resume` then runs it on as its next run, from its checkpoint. ``kill -9`` instead: the job
stays ``importing`` under a lease nobody renews; a take-over is refused while it is live, and
`importer job resume` runs the job on once it expired. Either way the job ends with the
counters and contacts of an undisturbed import (I1-I6), each batch applied once, the journey
moved and each firing intent released once, a bystander client untouched.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import uuid
from pathlib import Path

import orjson
import pytest

from importer.core.errors import IllegalTransitionError
from importer.core.models import JobStatus
from tests.acceptance.conftest import SEED, Contacts
from tests.acceptance.invariants import (
    assert_ledger_whole,
    job_outcome,
    other_clients_digest,
    reference,
)
from tests.acceptance.test_crash_resume import (
    BATCHES,
    CHUNK_SIZE,
    CLIENT,
    DEADLINE_S,
    PARTITIONS,
    REFERENCE_CLIENT,
    _add_bystander,
    _assert_triggers_released_once,
    _attach_triggers,
    _events,
)
from tests.jobs_support import (
    WAIT_S,
    Env,
    as_tuple,
    contacts_csv,
    eventually,
    job_env,
    ledger,
    ledger_chunks,
)
from tests.support import db_state, fetch

pytestmark = pytest.mark.acceptance

LEASE_S = "3"  # IMPORTER_LEASE_SECONDS of the CLI processes (the workers' setting)


async def test_sigint_cancels_truthfully_and_job_resume_ends_as_undisturbed(
    db_dsn: str, tmp_path: Path, contacts: Contacts
) -> None:
    done_before = random.Random(SEED).randint(3, BATCHES // 2)
    print(f"seed {SEED}: SIGINT after {done_before} batches")  # to replay a failure
    async with job_env(db_dsn, tmp_path) as env:
        others = await _bystander_digest(env)
        first = await _cli(env, tmp_path / "import.log", "import", *_import_args(contacts))
        job_id = await _started_job(env)
        await _attach_triggers(env, job_id)
        await _wait_batches(env, job_id, done_before)
        first.send_signal(signal.SIGINT)
        out, _ = await asyncio.wait_for(first.communicate(), WAIT_S)
        assert first.returncode == 128 + signal.SIGINT, _tail(tmp_path / "import.log")
        cancelled = orjson.loads(out)
        assert (cancelled["job_id"], cancelled["status"]) == (str(job_id), "cancelled")
        status, counters = await job_outcome(db_dsn, job_id)
        assert status is JobStatus.CANCELLED
        assert counters.balanced  # the identity intact, the ledger's truthful counters
        assert as_tuple(counters) == as_tuple(await ledger(db_dsn, job_id))
        assert cancelled["rows_read"] == counters.rows_read < contacts.rows
        batches_done = await ledger_chunks(db_dsn, job_id)
        assert done_before <= batches_done < BATCHES
        said = (tmp_path / "import.log").read_text()
        assert f"importer: import {job_id} (if interrupted: `importer job resume" in said  # first
        assert f"{job_id} cancelled: resume it with `importer job resume {job_id}`" in said
        journey = await fetch(
            db_dsn,
            "SELECT status FROM journey_classification_contact WHERE import_job_id = $1",
            job_id,
        )
        assert [r["status"] for r in journey] == ["AWAITING_IMPORT"]  # a cancel moves none

        await _resume(env, job_id, tmp_path / "resume.log", batches_done)
    await _assert_undisturbed(db_dsn, job_id, contacts, others, runs=2)
    runs = await fetch(
        db_dsn,
        "SELECT message_id, payload->>'type' AS type FROM outbox"
        " WHERE topic = 'notification' AND payload->>'job_id' = $1 ORDER BY id",
        str(job_id),
    )
    assert [(r["message_id"], r["type"]) for r in runs] == [
        (f"notification:{job_id}", "import_cancelled"),  # run 1, cancelled by its user
        (f"notification:{job_id}:2", "import_partial"),  # run 2: the final finalization
    ]


async def test_a_killed_cli_import_is_resumed_once_its_lease_expired(
    db_dsn: str, tmp_path: Path, contacts: Contacts
) -> None:
    done_before = random.Random(SEED + 1).randint(3, BATCHES // 2)
    print(f"seed {SEED + 1}: kill -9 after {done_before} batches")
    async with job_env(db_dsn, tmp_path) as env:
        others = await _bystander_digest(env)
        first = await _cli(env, tmp_path / "import.log", "import", *_import_args(contacts))
        job_id = await _started_job(env)
        await _attach_triggers(env, job_id)
        await _wait_batches(env, job_id, done_before)
        first.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(first.wait(), WAIT_S) == -signal.SIGKILL
        assert (await job_outcome(db_dsn, job_id))[0] is JobStatus.IMPORTING
        with pytest.raises(IllegalTransitionError, match="lease is live"):  # not abandoned yet
            await env.store.take_over_job(job_id, "someone", 30, "resume:early")

        async def lease_expired() -> bool | None:
            rows = await fetch(
                db_dsn,
                "SELECT lease_expires_at <= now() AS e FROM import_job WHERE id = $1",
                job_id,
            )
            return True if rows[0]["e"] else None

        await eventually(lease_expired)
        batches_done = await ledger_chunks(db_dsn, job_id)  # a COMMIT in flight has landed
        assert done_before <= batches_done < BATCHES
        await _resume(env, job_id, tmp_path / "resume.log", batches_done)
    await _assert_undisturbed(db_dsn, job_id, contacts, others, runs=1)
    run = await fetch(db_dsn, "SELECT run_generation FROM import_job WHERE id = $1", job_id)
    assert run[0]["run_generation"] == 1  # never finalized before: the same run went on


async def test_sigterm_ends_cancelled_with_143_and_a_second_signal_exits_at_once(
    db_dsn: str, tmp_path: Path
) -> None:
    """On a small file whose fourth chunk is slow (a failpoint): SIGTERM waits for it and exits
    143 with the job ``cancelled``; SIGINT twice exits 130 at once, the job left to its lease."""
    path = contacts_csv(tmp_path / "small.csv", 3000)
    args = [str(path), "--client-id", str(CLIENT), "--chunk-size", "200", "--concurrency", "1"]
    slow = {"IMPORTER_FAILPOINTS": "chunk:3=sleep:3000"}
    async with job_env(db_dsn, tmp_path) as env:
        first = await _cli(env, tmp_path / "term.log", "import", *args, "--json", **slow)
        job_id = await _started_job(env)
        await _wait_batches(env, job_id, 3)
        first.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(first.communicate(), WAIT_S)
        assert first.returncode == 128 + signal.SIGTERM, _tail(tmp_path / "term.log")
        assert orjson.loads(out)["status"] == "cancelled"
        status, counters = await job_outcome(db_dsn, job_id)
        assert status is JobStatus.CANCELLED
        assert as_tuple(counters) == as_tuple(await ledger(db_dsn, job_id))
        assert counters.balanced
        assert 800 <= counters.rows_read < 3000  # chunk 3 (in flight) committed

        await fetch(db_dsn, "DELETE FROM import_job WHERE id = $1", job_id)
        second = await _cli(env, tmp_path / "int.log", "import", *args, **slow)
        job_id = await _started_job(env)
        await _wait_batches(env, job_id, 3)
        second.send_signal(signal.SIGINT)
        await asyncio.sleep(0.2)  # the second Ctrl-C of an impatient user
        second.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(second.wait(), WAIT_S) == 128 + signal.SIGINT
        assert "interrupted again" in (tmp_path / "int.log").read_text()
        assert (await job_outcome(db_dsn, job_id))[0] is JobStatus.IMPORTING  # not finalized


# --- helpers ----------------------------------------------------------------------------------


def _import_args(contacts: Contacts) -> list[str]:
    return [
        str(contacts.path),
        *("--client-id", str(CLIENT), "--chunk-size", str(CHUNK_SIZE)),
        *("--concurrency", str(PARTITIONS), "--json"),
    ]


async def _bystander_digest(env: Env) -> str:
    await _add_bystander(env)
    return await other_clients_digest(env.dsn, CLIENT)


async def _cli(env: Env, log_path: Path, *args: str, **extra: str) -> asyncio.subprocess.Process:
    environ = {
        **os.environ,
        "DATABASE_URL": env.dsn,
        "IMPORTER_LEASE_SECONDS": LEASE_S,
        "IMPORTER_LOG_FORMAT": "json",
        "IMPORTER_LOG_LEVEL": "info",
        **extra,
    }
    environ.pop("RABBITMQ_URL", None)
    with log_path.open("wb") as log:  # the child keeps its own descriptor
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "importer",
            *args,
            env=environ,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
        )


async def _started_job(env: Env) -> uuid.UUID:
    async def created() -> uuid.UUID | None:
        rows = await fetch(env.dsn, "SELECT id FROM import_job WHERE client_id = $1", CLIENT)
        return rows[0]["id"] if rows else None

    return await eventually(created)


async def _wait_batches(env: Env, job_id: uuid.UUID, count: int) -> None:
    async def enough() -> int | None:
        done = await ledger_chunks(env.dsn, job_id)
        return done if done >= count else None

    await eventually(enough, timeout_s=DEADLINE_S)


async def _resume(env: Env, job_id: uuid.UUID, log_path: Path, batches_done: int) -> None:
    """`importer job resume` runs the job to its end here, from its checkpoint: exit 0, and only
    the batches the ledger did not hold are applied."""
    resumed = await _cli(env, log_path, "job", "resume", str(job_id), "--json")
    out, _ = await asyncio.wait_for(resumed.communicate(), DEADLINE_S)
    assert resumed.returncode == 0, _tail(log_path)
    document = orjson.loads(out)
    assert (document["job_id"], document["status"]) == (str(job_id), "completed_with_placeholders")
    events = _events(log_path)
    starts = [e for e in events if e["event"] == "import_resumed"]
    assert len(starts) == 1
    assert isinstance(starts[0]["offset"], int)
    assert starts[0]["offset"] > 0  # from the checkpoint, not from the file's start
    applied = sum(e["event"] == "chunk_applied" and not e["repeated"] for e in events)
    assert applied == BATCHES - batches_done


async def _assert_undisturbed(
    dsn: str, job_id: uuid.UUID, contacts: Contacts, others: str, *, runs: int
) -> None:
    assert await other_clients_digest(dsn, CLIENT) == others  # I5, before the reference
    undisturbed = await reference(dsn, contacts.path, REFERENCE_CLIENT)
    status, counters = await job_outcome(dsn, job_id)
    assert status is undisturbed.status
    assert as_tuple(counters) == undisturbed.counters
    assert counters.rows_read == contacts.rows
    await assert_ledger_whole(dsn, job_id, counters, runs=runs)  # I1-I4
    assert await ledger_chunks(dsn, job_id) == BATCHES
    assert await db_state(dsn, CLIENT) == undisturbed.state  # I6
    await _assert_triggers_released_once(dsn, job_id)  # I4: each trigger released once
    stats = await fetch(
        dsn,
        "SELECT count(*) AS n FROM outbox WHERE topic = 'contact-import/stats-refresh'"
        " AND payload->>'job_id' = $1",
        str(job_id),
    )
    assert stats[0]["n"] == 1  # I4: one downstream trigger


def _tail(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()[-20:]
