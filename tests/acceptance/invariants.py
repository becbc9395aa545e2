"""The catalog's invariants I1-I6 for one import of a generated file, checked after a fault.

I1 conservation (and the counters equal the generator's oracle), I2 one contact per key, I3 the
job terminal with every ledger row terminal and no piece twice, I4 one finalization row and one
notification, I5 other clients untouched, I6 the final contacts equal an undisturbed import of
the same file (in-process, another client; made once per file and session, see `reference`).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from pathlib import Path

from benchmarks.generate import GenerationStats
from importer.core.models import Counters, JobStatus
from importer.core.reference import ContactState
from tests.jobs_support import as_tuple, ledger
from tests.support import db_state, fetch, finalization_counts, import_file


@dataclass(frozen=True)
class Reference:
    """What an undisturbed import of a file gives: its status, counters and final contacts."""

    status: JobStatus
    counters: tuple[int, ...]
    state: dict[str, ContactState]


_references: dict[Path, Reference] = {}


async def reference(dsn: str, path: Path, client: int) -> Reference:
    """The undisturbed import of ``path`` (MERGE, into ``client`` of ``dsn``, which must hold
    none of its rows yet), made the first time a session asks for that file and remembered: the
    result depends on neither the database nor the chunking (that is the claim under test), so
    every fault test of one file compares with one undisturbed run."""
    if path not in _references:
        outcome = await import_file(dsn, path, client, chunk_size=5000, concurrency=4)
        _references[path] = Reference(
            outcome.status, as_tuple(outcome.counters), await db_state(dsn, client)
        )
    return _references[path]


@dataclass(frozen=True)
class Imported:
    """The file under test and what the generator knows about it."""

    path: Path
    stats: GenerationStats


async def job_outcome(dsn: str, job_id: uuid.UUID) -> tuple[JobStatus, Counters]:
    """The job row's status and counters."""
    job = (await fetch(dsn, "SELECT * FROM import_job WHERE id = $1", job_id))[0]
    counters = Counters(
        job["rows_read"], job["inserted"], job["updated"], job["invalid"], job["error"],
        job["ignored"],
    )  # fmt: skip
    return JobStatus(job["status"]), counters


async def assert_ledger_whole(
    dsn: str, job_id: uuid.UUID, counters: Counters, *, runs: int = 1
) -> None:
    """I1 (the counters balance and equal the ledger's sums), I2 (one contact per key), I3 (no
    piece twice, none left non-terminal) and I4's finalization row and notification: one per
    finalized run (a job cancelled, then resumed as its next run, was finalized twice; its last
    finalization's row alone remains)."""
    assert counters.balanced  # I1
    assert as_tuple(await ledger(dsn, job_id)) == as_tuple(counters)
    assert not await fetch(  # I2 (and the unique index that guarantees it)
        dsn,
        "SELECT client_id, cpf_cnpj FROM contact WHERE cpf_cnpj IS NOT NULL"
        " GROUP BY 1, 2 HAVING count(*) > 1",
    )
    assert not await fetch(  # I3: no piece twice, none left non-terminal
        dsn,
        "SELECT chunk_no, partition, part FROM import_chunk WHERE job_id = $1"
        " GROUP BY 1, 2, 3 HAVING count(*) > 1 OR bool_or(status NOT IN ('done', 'discarded'))",
        job_id,
    )
    assert await finalization_counts(dsn, job_id) == (1, runs)  # I4


async def other_clients_digest(dsn: str, client: int) -> str:
    """A checksum of every other client's contacts, channels and custom values (I5)."""
    digest = hashlib.sha256()
    for sql in (
        "SELECT id, client_id, cpf_cnpj, name, street_address FROM contact"
        " WHERE client_id <> $1 ORDER BY id",
        "SELECT contact_id, channel_id, value FROM contact_details"
        " WHERE client_id <> $1 ORDER BY 1, 2, 3",
        "SELECT contact_id, custom_field_id, value FROM contact_custom_fields"
        " WHERE client_id <> $1 ORDER BY 1, 2",
    ):
        for row in await fetch(dsn, sql, client):
            digest.update(repr(tuple(row)).encode())
    return digest.hexdigest()


async def assert_invariants(
    dsn: str,
    job_id: uuid.UUID,
    imported: Imported,
    *,
    client: int,
    reference_client: int,
    others_before: str | None = None,
) -> None:
    status, counters = await job_outcome(dsn, job_id)
    stats = imported.stats
    assert status is JobStatus.COMPLETED_WITH_PLACEHOLDERS  # I3
    expected = (stats.rows, stats.distinct_keys, stats.repeated_rows, stats.bad_check_digits)
    assert (counters.rows_read, counters.inserted, counters.updated, counters.invalid) == expected
    assert (counters.error, counters.ignored) == (0, 0)
    await assert_ledger_whole(dsn, job_id, counters)  # I1-I4
    outbox = await fetch(
        dsn,
        "SELECT topic, count(*) AS n FROM outbox WHERE payload->>'job_id' = $1 GROUP BY 1",
        str(job_id),
    )
    assert {r["topic"]: r["n"] for r in outbox} == {
        "notification": 1,
        "contact-import/stats-refresh": 1,
    }  # I4: one notification, one downstream trigger
    if others_before is not None:  # I5
        assert await other_clients_digest(dsn, client) == others_before
    # The reference runs with 4 consumers whatever the import had: the result does not depend
    # on it (that is the claim), and it is faster.
    undisturbed = await reference(dsn, imported.path, reference_client)
    assert undisturbed.counters == as_tuple(counters)
    assert await db_state(dsn, client) == undisturbed.state  # I6
