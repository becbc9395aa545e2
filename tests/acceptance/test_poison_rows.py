"""Catalog T11: three poison rows in the middle of the generated file — a NUL byte,
bytes that are not UTF-8, and a value the database refuses (a CHECK constraint the test adds) —
imported by `importer worker`. Only those rows are lost (two `invalid`, one `error`, each in the
error report with its line and reason); every other row lands exactly as in an undisturbed
import of the clean file; no batch is retried, the refused one is split down to its row."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.acceptance.conftest import ROWS, Contacts
from tests.acceptance.invariants import (
    assert_ledger_whole,
    job_outcome,
    other_clients_digest,
    reference,
)
from tests.acceptance.test_crash_resume import (
    CLIENT,
    DEADLINE_S,
    REFERENCE_CLIENT,
    _bystanders,
    _events,
    _is_terminal,
    _log_tail,
    _logged,
    _queued_job,
    _worker,
)
from tests.integration.test_poison_rows import POISON, forbid_poison
from tests.jobs_support import WAIT_S, as_tuple, eventually, job_env
from tests.support import cpf, db_state, fetch

pytestmark = pytest.mark.acceptance

# The poison rows follow the middle line of the catalog file (it has no quoted newline).
AFTER_LINE = ROWS // 2 + 1
POISON_LINES = {
    AFTER_LINE + 1: (f"Nul\x00Byte,{cpf(987_650_001)},,,,,,,\n".encode(), "nul_byte"),
    AFTER_LINE + 2: (b"Bad \xff\xfe Bytes," + cpf(987_650_002).encode() + b",,,,,,,\n",
                     "invalid_encoding"),
    AFTER_LINE + 3: (f"{POISON},{cpf(987_650_003)},,,,,,,\n".encode(), "row_rejected"),
}  # fmt: skip


def _poisoned(source: Path, out: Path) -> Path:
    with source.open("rb") as reader, out.open("wb") as writer:
        for number, line in enumerate(reader, start=1):
            writer.write(line)
            if number == AFTER_LINE:
                writer.writelines(row for row, _ in POISON_LINES.values())
    return out


async def test_poison_rows_cost_only_themselves_in_the_catalog_import(
    db_dsn: str, tmp_path: Path, contacts: Contacts
) -> None:
    path = _poisoned(contacts.path, tmp_path / "poisoned.csv")
    poisoned = Contacts(path, contacts.rows + len(POISON_LINES), contacts.stats)
    await forbid_poison(db_dsn)
    log = tmp_path / "worker.log"
    async with job_env(db_dsn, tmp_path) as env:
        job_id = await _queued_job(env, poisoned)
        worker = await _worker(env, log)
        try:

            async def finished() -> bool | None:
                return True if await _is_terminal(env, job_id) else None

            await eventually(finished, timeout_s=DEADLINE_S)
            await eventually(lambda: _logged(log, "worker_started"))
        finally:
            worker.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(worker.wait(), WAIT_S)
    assert code == 0, _log_tail(log)
    assert await other_clients_digest(db_dsn, CLIENT) == _bystanders[job_id]  # I5
    clean = await reference(db_dsn, contacts.path, REFERENCE_CLIENT)
    status, counters = await job_outcome(db_dsn, job_id)
    read, inserted, updated, invalid, error, ignored = clean.counters
    assert status is clean.status  # I3
    assert as_tuple(counters) == (read + 3, inserted, updated, invalid + 2, error + 1, ignored)
    await assert_ledger_whole(db_dsn, job_id, counters)  # I1-I4
    assert await db_state(db_dsn, CLIENT) == clean.state  # I6: every other row landed
    reported = await fetch(
        db_dsn,
        "SELECT line, reason FROM import_row_error WHERE job_id = $1 AND line = ANY($2::int[])",
        job_id,
        list(POISON_LINES),
    )
    assert {(r["line"], r["reason"]) for r in reported} == {
        (line, reason) for line, (_, reason) in POISON_LINES.items()
    }
    events = _events(log)
    assert not [e for e in events if e["event"] in ("batch_retry", "batch_discarded")]
    assert [e["line"] for e in events if e["event"] == "row_rejected"] == [AFTER_LINE + 3]
    assert [e for e in events if e["event"] == "batch_split"]
