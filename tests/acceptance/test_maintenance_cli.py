"""``importer maintenance`` (issue 26) as an operator's timer runs it: the workers' sweeps once
against DATABASE_URL — an expired preview cancelled, an old import purged (its raw values and
ledger), old outbox messages and webhook deliveries deleted — one summary line or ``--json``,
exit 0; a second run finds nothing left."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.acceptance.test_admin_cli import importer
from tests.support import fetch

pytestmark = pytest.mark.acceptance


async def _job(dsn: str, status: str, **columns: str) -> uuid.UUID:
    job_id = uuid.uuid4()
    names = ", ".join(columns)
    values = ", ".join(columns.values())
    await fetch(
        dsn,
        "INSERT INTO import_job (id, client_id, status, source, input_format, conflict_strategy,"
        f" chunk_size, partitions, {names})"
        f" VALUES ($1::uuid, 7, '{status}', '7/' || $1::text || '/x.csv', 'csv', 'merge', 10, 1,"
        f" {values})",
        job_id,
    )
    return job_id


async def _due_state(dsn: str) -> tuple[uuid.UUID, uuid.UUID]:
    """An old completed import with a raw report value and a ledger row, an expired preview,
    an old published outbox message and an old delivered webhook."""
    old = await _job(dsn, "completed", finished_at="now() - interval '40 days'")
    await fetch(
        dsn,
        "INSERT INTO import_row_error (job_id, line, reason, severity, value)"
        " VALUES ($1, 2, 'invalid_cpf', 'invalid', '123')",
        old,
    )
    await fetch(
        dsn,
        "INSERT INTO import_chunk (job_id, chunk_no, partition, status, first_line, end_offset)"
        " VALUES ($1, 0, 0, 'done', 2, 100)",
        old,
    )
    preview = await _job(
        dsn,
        "ready",
        awaiting_apply="true",
        preview_expires_at="now() - interval '1 hour'",
    )
    await fetch(
        dsn,
        "INSERT INTO outbox (message_id, topic, payload, published_at)"
        " VALUES ('notification:old', 'notification', '{}', now() - interval '8 days')",
    )
    await fetch(
        dsn,
        "INSERT INTO webhook_delivery (delivery_id, job_id, client_id, event, url, delivered_at)"
        " VALUES ('notification:w', $1, 7, 'import_done', 'https://example.com/',"
        " now() - interval '31 days')",
        old,
    )
    return old, preview


async def test_maintenance_runs_the_sweeps_once(db_dsn: str, tmp_path: Path) -> None:
    old, preview = await _due_state(db_dsn)
    storage = {"IMPORTER_STORAGE_DIR": str(tmp_path / "objects")}

    done = importer(db_dsn, "maintenance", "--json", **storage)

    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert (document["previews_expired"], document["undos_failed"]) == (1, 0)
    assert (document["jobs"], document["raw_values"], document["ledger_rows"]) == (1, 1, 1)
    assert (document["outbox"], document["webhooks"]) == (1, 1)
    rows = await fetch(
        db_dsn,
        "SELECT (SELECT status FROM import_job WHERE id = $2) AS preview,"
        " (SELECT purged_at IS NOT NULL FROM import_job WHERE id = $1) AS purged,"
        " (SELECT count(*) FROM import_row_error WHERE job_id = $1 AND value IS NULL) AS lines,"
        " (SELECT count(*) FROM import_chunk) AS ledger,"
        " (SELECT count(*) FROM webhook_delivery) + (SELECT count(*) FROM outbox"
        "  WHERE message_id = 'notification:old') AS events",
        old,
        preview,
    )
    assert dict(rows[0]) == {
        "preview": "cancelled",
        "purged": True,
        "lines": 1,  # the report's line and reason stay
        "ledger": 0,
        "events": 0,
    }

    again = importer(db_dsn, "maintenance", **storage)

    assert again.returncode == 0, again.stderr
    assert again.stdout.count("\n") == 1, again.stdout
    assert again.stdout.startswith(
        "importer: maintenance: 0 previews expired, 0 stale undos failed; 0 imports purged"
    )


def test_maintenance_without_a_database_is_a_configuration_error(tmp_path: Path) -> None:
    done = importer("postgresql://postgres@127.0.0.1:1/none", "maintenance")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert "127.0.0.1:1" in done.stderr
