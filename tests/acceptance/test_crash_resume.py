"""Crash and resume (catalog T02/T03/T17): `importer worker` dies at a failpoint, or by a real
``kill -9`` mid-import, while importing the catalog file; a second worker reclaims the job once
the lease expires and finishes it.

After each: the job's counters and the client's contacts, details and custom values equal an
undisturbed import of the same file (I6: `invariants.reference`), the counters balance (I1), no
key twice (I2), the job is terminal with every ledger row terminal and no piece twice (I3),
exactly one finalization row and one notification, the journey moved and each firing intent
released once (I4), and a bystander client's rows are byte-identical (I5).
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import signal
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from importer.core.failpoints import CRASH_EXIT_CODE
from importer.core.models import TERMINAL_STATUSES
from tests.acceptance.conftest import CHUNK_SIZE, ROWS, SEED, Contacts
from tests.acceptance.invariants import (
    assert_ledger_whole,
    job_outcome,
    other_clients_digest,
    reference,
)
from tests.jobs_support import (
    WAIT_S,
    Env,
    as_tuple,
    eventually,
    job_env,
    ledger_chunks,
    upload_job,
)
from tests.support import db_contacts, db_state, fetch, import_file

pytestmark = pytest.mark.acceptance


PARTITIONS = 2
BATCHES = math.ceil(ROWS / CHUNK_SIZE) * PARTITIONS
CLIENT = 31
REFERENCE_CLIENT = 32
BYSTANDER = 33
DEADLINE_S = ROWS / 1000 + 60  # the catalog's bound for a chaos test to end


@dataclass(frozen=True)
class AfterCrash:
    """What the database holds once the first worker died."""

    batches_done: int
    terminal: bool


# spec → what must hold right after the crash (two consumers: a sibling may be mid-batch).
CASES = {
    "after_claim=crash": lambda s: s.batches_done == 0 and not s.terminal,
    "after_copy_before_commit=crash@3": lambda s: s.batches_done <= 2 and not s.terminal,
    "after_commit=crash@3": lambda s: 3 <= s.batches_done < BATCHES and not s.terminal,
    "before_finalize=crash": lambda s: s.batches_done == BATCHES and not s.terminal,
    "after_finalize_before_return=crash": lambda s: s.batches_done == BATCHES and s.terminal,
}


@pytest.mark.parametrize("spec", list(CASES))
async def test_a_worker_crashed_at_a_failpoint_is_resumed_by_the_next(
    db_dsn: str, tmp_path: Path, contacts: Contacts, spec: str
) -> None:
    async with job_env(db_dsn, tmp_path) as env:
        job_id = await _queued_job(env, contacts)
        first = await _worker(env, tmp_path / "first.log", failpoints=spec)
        code = await asyncio.wait_for(first.wait(), DEADLINE_S)
        assert code == CRASH_EXIT_CODE, _log_tail(tmp_path / "first.log")
        after = AfterCrash(await ledger_chunks(db_dsn, job_id), await _is_terminal(env, job_id))
        assert CASES[spec](after), after
        await _resume(env, job_id, tmp_path / "second.log")
    await _assert_invariants(db_dsn, job_id, contacts)


async def test_a_worker_killed_mid_import_is_resumed_by_the_next(
    db_dsn: str, tmp_path: Path, contacts: Contacts
) -> None:
    done_before_kill = random.Random(SEED).randint(3, BATCHES // 2)
    print(f"seed {SEED}: kill -9 after {done_before_kill} batches")  # to replay a failure
    async with job_env(db_dsn, tmp_path) as env:
        job_id = await _queued_job(env, contacts)
        first = await _worker(env, tmp_path / "first.log")

        async def enough_done() -> int | None:
            done = await ledger_chunks(db_dsn, job_id)
            return done if done >= done_before_kill else None

        await eventually(enough_done)
        first.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(first.wait(), WAIT_S) == -signal.SIGKILL
        assert not await _is_terminal(env, job_id)
        done = await ledger_chunks(db_dsn, job_id)
        assert done_before_kill <= done < BATCHES
        await _resume(env, job_id, tmp_path / "second.log")
    await _assert_invariants(db_dsn, job_id, contacts)


EMAIL_KEY = {"key": "email", "columns": {"cpf": "ignore"}}
EMAIL_CLIENT, EMAIL_REFERENCE_CLIENT = 34, 35
EMAIL_PARTITIONS = 2  # the catalog's e-mails hash to both (core.keys.KeyGroups)
EMAIL_BATCHES = math.ceil(ROWS / CHUNK_SIZE) * EMAIL_PARTITIONS


@pytest.mark.parametrize("spec", ["after_copy_before_commit=crash@3", "after_commit=crash@3"])
async def test_an_email_keyed_import_crashed_at_a_failpoint_resumes_to_the_same_end(
    db_dsn: str, tmp_path: Path, contacts: Contacts, spec: str
) -> None:
    """Issue 14 point 5: the catalog file keyed by e-mail (its CPF column ignored) — rows found
    by e-mail among the contacts the import itself created before the crash — ends as its
    undisturbed import does, contact for contact, with no batch applied twice."""
    async with job_env(db_dsn, tmp_path) as env:
        job_id = await upload_job(
            env, EMAIL_CLIENT, contacts.path, chunk_size=CHUNK_SIZE,
            partitions=EMAIL_PARTITIONS, layout=EMAIL_KEY,
        )  # fmt: skip
        await env.views.start_job(EMAIL_CLIENT, job_id, "op-1")
        first = await _worker(env, tmp_path / "first.log", failpoints=spec)
        code = await asyncio.wait_for(first.wait(), DEADLINE_S)
        assert code == CRASH_EXIT_CODE, _log_tail(tmp_path / "first.log")
        await _resume(env, job_id, tmp_path / "second.log", EMAIL_CLIENT, EMAIL_BATCHES)
    undisturbed = await import_file(
        db_dsn, contacts.path, EMAIL_REFERENCE_CLIENT, chunk_size=5000, layout_document=EMAIL_KEY
    )
    status, counters = await job_outcome(db_dsn, job_id)
    assert status is undisturbed.status
    assert as_tuple(counters) == as_tuple(undisturbed.counters)
    await assert_ledger_whole(db_dsn, job_id, counters)
    assert await ledger_chunks(db_dsn, job_id) == EMAIL_BATCHES
    assert not await fetch(  # I2 under the key: no e-mail on two live contacts of the client
        db_dsn,
        "SELECT d.value FROM contact_details d JOIN contact c ON c.id = d.contact_id"
        " WHERE c.client_id = $1 AND d.channel_id = 3 AND d.deleted_at IS NULL"
        " GROUP BY 1 HAVING count(*) > 1",
        EMAIL_CLIENT,
    )
    assert await db_contacts(db_dsn, EMAIL_CLIENT) == await db_contacts(
        db_dsn, EMAIL_REFERENCE_CLIENT
    )


# --- helpers ----------------------------------------------------------------------------------


_bystanders: dict[uuid.UUID, str] = {}  # job → the other clients' digest when it was queued


async def _queued_job(env: Env, contacts: Contacts) -> uuid.UUID:
    await _add_bystander(env)
    job_id = await upload_job(
        env, CLIENT, contacts.path, chunk_size=CHUNK_SIZE, partitions=PARTITIONS
    )
    await _attach_triggers(env, job_id)
    _bystanders[job_id] = await other_clients_digest(env.dsn, CLIENT)
    await env.views.start_job(CLIENT, job_id, "op-1")
    return job_id


async def _add_bystander(env: Env) -> None:
    """Another client holding some of the same keys, with channels and custom values (I5)."""
    async with env.pool.acquire() as conn, conn.transaction():
        if await conn.fetchval("SELECT 1 FROM contact WHERE client_id = $1", BYSTANDER):
            return
        field = await conn.fetchval(
            "INSERT INTO custom_field (client_id, name) VALUES ($1, 'plano') RETURNING id",
            BYSTANDER,
        )
        await conn.execute(
            "WITH c AS (INSERT INTO contact (client_id, cpf_cnpj, name)"
            "  SELECT $1, lpad(n::text, 11, '0'), 'bystander ' || n FROM generate_series(1, 500) n"
            "  RETURNING id)"
            " , d AS (INSERT INTO contact_details (contact_id, client_id, channel_id, value)"
            "  SELECT id, $1, 3, 'b' || id || '@example.com' FROM c)"
            " INSERT INTO contact_custom_fields (contact_id, client_id, custom_field_id, value)"
            " SELECT id, $1, $2, 'gold' FROM c",
            BYSTANDER,
            field,
        )


async def _attach_triggers(env: Env, job_id: uuid.UUID) -> None:
    """A journey waiting for the import and an HSM and an SMS firing intent held by it (seed
    003 §9, §10): finalization must move and release each exactly once."""
    async with env.pool.acquire() as conn:
        journey = await conn.fetchval(
            "INSERT INTO journey (client_id, name) VALUES ($1, 'j') RETURNING id", CLIENT
        )
        await conn.execute(
            "INSERT INTO journey_classification_contact (journey_id, client_id, import_job_id,"
            " status, auto_start_journey_mailing) VALUES ($1, $2, $3, 'AWAITING_IMPORT', true)",
            journey,
            CLIENT,
            job_id,
        )
        await conn.executemany(
            "INSERT INTO firing_intent (client_id, kind, import_job_id) VALUES ($1, $2, $3)",
            [(CLIENT, "hsm", job_id), (CLIENT, "sms", job_id)],
        )


async def _assert_triggers_released_once(dsn: str, job_id: uuid.UUID) -> None:
    journey = await fetch(
        dsn,
        "SELECT status, contact_amount FROM journey_classification_contact"
        " WHERE import_job_id = $1",
        job_id,
    )
    if not journey:  # a job made without triggers (other tests reuse these helpers)
        return
    assert [r["status"] for r in journey] == ["ACTIVE"]
    linked = await fetch(  # contact_amount: the classification's distinct contacts (issue 25)
        dsn,
        "SELECT count(DISTINCT l.contact_id) AS n FROM journey_contact l"
        " JOIN journey_classification_contact c ON c.id = l.journey_classification_contact_id"
        " WHERE c.import_job_id = $1",
        job_id,
    )
    assert journey[0]["contact_amount"] == linked[0]["n"]
    released = await fetch(
        dsn,
        "SELECT o.topic, count(*) AS n FROM outbox o JOIN firing_intent i"
        " ON o.message_id = 'firing:' || i.id WHERE i.import_job_id = $1 GROUP BY 1",
        job_id,
    )
    assert {r["topic"]: r["n"] for r in released} == {
        "hsm/importing-intent": 1,
        "sms/firing-intent": 1,
    }


async def _worker(env: Env, log_path: Path, *, failpoints: str = "") -> asyncio.subprocess.Process:
    environ = {
        **os.environ,
        "DATABASE_URL": env.dsn,
        "IMPORTER_STORAGE_DIR": str(log_path.parent / "objects"),  # job_env's store
        "IMPORTER_LEASE_SECONDS": "2",
        "IMPORTER_CONCURRENCY": str(PARTITIONS),
        "IMPORTER_LOG_FORMAT": "json",
        "IMPORTER_LOG_LEVEL": "info",
        "IMPORTER_FAILPOINTS": failpoints,
    }
    environ.pop("S3_ENDPOINT_URL", None)
    with log_path.open("wb") as log:  # the child keeps its own descriptor
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "importer", "worker", env=environ, stderr=log
        )


async def _resume(
    env: Env,
    job_id: uuid.UUID,
    log_path: Path,
    client: int = CLIENT,
    batches: int = BATCHES,
) -> None:
    """Once the dead worker's lease expired, a second worker finishes the job; SIGTERM → 0."""

    async def lease_expired() -> bool | None:
        rows = await fetch(
            env.dsn,
            "SELECT coalesce(lease_expires_at <= now(), true) AS expired"
            " FROM import_job WHERE id = $1",
            job_id,
        )
        return True if rows[0]["expired"] else None

    await eventually(lease_expired)
    # Read now: a COMMIT the dead worker sent just before dying has landed by the expiry.
    batches_done = await ledger_chunks(env.dsn, job_id)
    was_terminal = await _is_terminal(env, job_id, client)  # finalized: nothing to run
    second = await _worker(env, log_path)
    try:

        async def finished() -> bool | None:
            return True if await _is_terminal(env, job_id, client) else None

        await eventually(finished, timeout_s=DEADLINE_S)
        await eventually(lambda: _logged(log_path, "worker_started"))  # its signal handlers set
    finally:
        second.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(second.wait(), WAIT_S)
    assert code == 0, _log_tail(log_path)
    events = _events(log_path)
    claims = [e["job_id"] for e in events if e["event"] == "job_claimed"]
    assert claims == ([] if was_terminal else [str(job_id)])
    # Only the batches the ledger did not hold were applied again: no piece twice.
    applied = sum(e["event"] == "chunk_applied" for e in events)
    assert applied == batches - batches_done


async def _is_terminal(env: Env, job_id: uuid.UUID, client: int = CLIENT) -> bool:
    return (await env.views.view_job(client, job_id)).status in TERMINAL_STATUSES


async def _assert_invariants(dsn: str, job_id: uuid.UUID, contacts: Contacts) -> None:
    others = _bystanders.get(job_id)
    if others is not None:  # I5, before the reference may add a client to this database
        assert await other_clients_digest(dsn, CLIENT) == others
    undisturbed = await reference(dsn, contacts.path, REFERENCE_CLIENT)
    status, counters = await job_outcome(dsn, job_id)
    assert status is undisturbed.status
    assert as_tuple(counters) == undisturbed.counters
    assert counters.rows_read == contacts.rows
    await assert_ledger_whole(dsn, job_id, counters)  # I1-I4
    assert await ledger_chunks(dsn, job_id) == BATCHES
    assert await db_state(dsn, CLIENT) == undisturbed.state  # I6
    await _assert_triggers_released_once(dsn, job_id)  # I4: each trigger released once


def _events(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.startswith(b"{")]


async def _logged(path: Path, event: str) -> bool | None:
    return True if any(e["event"] == event for e in _events(path)) else None


def _log_tail(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()[-20:]
