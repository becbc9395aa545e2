"""`importer status JOB` and `importer history`: the API's documents, straight from the database."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import pytest

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.views import PostgresJobViews
from importer.services.documents import job_document
from tests.acceptance.test_admin_cli import failed_job, importer, one_line_failure
from tests.support import bad_cpf, cpf, write_csv

pytestmark = pytest.mark.acceptance


async def api_document(dsn: str, client_id: int, job_id: str) -> dict[str, object]:
    """What `GET /v1/imports/{id}` answers for the job (the same view and builder)."""
    pool = await connect_pool(dsn, 1)
    try:
        view = await PostgresJobViews(pool).view_job(client_id, uuid.UUID(job_id))
    finally:
        await pool.close()
    return job_document(view, dt.datetime.now(dt.UTC))


async def test_status_is_the_api_document(db_dsn: str, tmp_path: Path) -> None:
    rows = [["A", cpf(4100)], ["B", bad_cpf(4101)], ["C", cpf(4102)]]
    path = write_csv(tmp_path / "c.csv", ["nome", "cpf"], rows)
    imported = importer(db_dsn, "import", str(path), "--client-id", "11", "--json")
    job_id = json.loads(imported.stdout)["job_id"]

    done = importer(db_dsn, "status", job_id, "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document == {"id": job_id, "client_id": 11, **await api_document(db_dsn, 11, job_id)}
    assert document["status"] == "completed"
    assert document["counters"]["invalid"] == 1
    assert document["progress"]["percent"] == 100.0

    table = importer(db_dsn, "status", job_id)
    assert table.returncode == 0, table.stderr
    for shown in (job_id, "counters.invalid", "progress.percent", "completed"):
        assert shown in table.stdout
    assert "fail_reason" not in table.stdout  # absent fields are left out

    failed = await failed_job(db_dsn)
    shown = importer(db_dsn, "status", str(failed))
    assert "source_unavailable" in shown.stdout

    one_line_failure(importer(db_dsn, "status", str(uuid.uuid4())), 1, "does not exist")
    assert importer(db_dsn, "status", "not-an-id").returncode == 2


async def test_history_newest_first_with_filters(db_dsn: str, tmp_path: Path) -> None:
    jobs = []
    for n, (client, user) in enumerate([(21, "ana"), (22, "bia"), (21, "bia"), (21, "ana")]):
        path = write_csv(tmp_path / f"{n}.csv", ["nome", "cpf"], [["A", cpf(4200 + n)]])
        args = ["import", str(path), "--client-id", str(client), "--user-id", user, "--json"]
        jobs.append(json.loads(importer(db_dsn, *args).stdout)["job_id"])
    failed = str(await failed_job(db_dsn))  # client 7, the newest

    def ids(*args: str) -> list[str]:
        done = importer(db_dsn, "history", *args, "--json")
        assert done.returncode == 0, done.stderr
        return [item["id"] for item in json.loads(done.stdout)["items"]]

    assert ids() == [failed, *reversed(jobs)]
    assert ids("--client-id", "21") == [jobs[3], jobs[2], jobs[0]]
    assert ids("--client-id", "21", "--user-id", "bia") == [jobs[2]]
    assert ids("--user-id", "bia") == [jobs[2], jobs[1]]
    assert ids("--status", "failed") == [failed]
    assert ids("--status", "failed", "--status", "completed", "--limit", "2") == [failed, jobs[3]]
    page = json.loads(importer(db_dsn, "history", "--limit", "2", "--json").stdout)
    assert page["more"] is True
    assert page["items"][1] == {
        "id": jobs[3],
        "client_id": 21,
        **await api_document(db_dsn, 21, jobs[3]),
    }

    table = importer(db_dsn, "history", "--client-id", "21")
    assert table.returncode == 0, table.stderr
    assert all(job in table.stdout for job in (jobs[0], jobs[2], jobs[3]))
    assert jobs[1] not in table.stdout
    assert importer(db_dsn, "history", "--status", "nonsense").returncode == 2
