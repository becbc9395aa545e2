"""The owner's commands (`importer job …`, `importer dlq …`) as an operator runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import aio_pika
import pytest

from importer.settings import Settings
from importer.wiring import broker_topology
from tests.support import cpf, fetch, write_csv

pytestmark = pytest.mark.acceptance

RABBITMQ_URL = os.environ.get("RABBITMQ_TEST_URL", "amqp://guest:guest@127.0.0.1:5672/")


def importer(dsn: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    inherited = {k: v for k, v in os.environ.items() if k != "RABBITMQ_URL"}
    full_env = {**inherited, "DATABASE_URL": dsn, "IMPORTER_LOG_LEVEL": "warning", **env}
    return subprocess.run(
        [sys.executable, "-m", "importer", *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def one_line_failure(done: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert done.returncode == code, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert text in done.stderr, done.stderr


async def failed_job(dsn: str) -> uuid.UUID:
    """A job a worker ran and failed (a finalization row and its notification written)."""
    job_id = uuid.uuid4()
    await fetch(
        dsn,
        "INSERT INTO import_job (id, client_id, status, source, input_format, conflict_strategy,"
        " chunk_size, partitions, fail_reason, finished_at)"
        " VALUES ($1, 7, 'failed', '7/x.csv', 'csv', 'merge', 10, 1, 'source_unavailable', now())",
        job_id,
    )
    await fetch(
        dsn,
        "INSERT INTO import_batch_finalized (batch_id, client_id, total, imported, updated,"
        " failed, finalized_at) VALUES ($1, 7, 0, 0, 0, 0, now())",
        job_id,
    )
    return job_id


async def test_job_commands(db_dsn: str, tmp_path: Path) -> None:
    path = write_csv(tmp_path / "c.csv", ["nome", "cpf"], [["A", cpf(3100)], ["B", cpf(3101)]])
    imported = importer(db_dsn, "import", str(path), "--client-id", "7", "--json")
    job_id = json.loads(imported.stdout)["job_id"]

    removed = importer(db_dsn, "job", "remove-data", job_id)
    assert removed.returncode == 0, removed.stderr
    assert json.loads(removed.stdout)["contacts"] == 2
    again = json.loads(importer(db_dsn, "job", "remove-data", job_id).stdout)
    assert (again["contacts"], again["chunks"]) == (0, 0)
    live = await fetch(db_dsn, "SELECT count(*) AS n FROM contact WHERE deleted_at IS NULL")
    assert live[0]["n"] == 0

    # A command-line import is handed to the workers: they read its sealed local file.
    handed = importer(db_dsn, "job", "requeue", job_id)
    assert handed.returncode == 0, handed.stderr
    assert json.loads(handed.stdout)["run"] == 2
    row = await fetch(
        db_dsn, "SELECT in_process, local_path FROM import_job WHERE id = $1", uuid.UUID(job_id)
    )
    assert (row[0]["in_process"], row[0]["local_path"]) == (False, str(path.absolute()))
    one_line_failure(importer(db_dsn, "job", "requeue", job_id), 1, "queued")
    one_line_failure(importer(db_dsn, "job", "requeue", str(uuid.uuid4())), 1, "does not exist")
    assert importer(db_dsn, "job", "requeue", "not-an-id").returncode == 2

    failed = await failed_job(db_dsn)
    requeued = importer(db_dsn, "job", "requeue", str(failed))
    assert requeued.returncode == 0, requeued.stderr
    document = json.loads(requeued.stdout)
    assert (document["status"], document["run"], document["finalizations_removed"]) == (
        "queued",
        2,
        1,
    )
    row = await fetch(db_dsn, "SELECT status, fail_reason FROM import_job WHERE id = $1", failed)
    assert (row[0]["status"], row[0]["fail_reason"]) == ("queued", None)
    one_line_failure(importer(db_dsn, "job", "requeue", str(failed)), 1, "queued")


async def test_dlq_commands(db_dsn: str) -> None:
    one_line_failure(importer(db_dsn, "dlq", "list"), 1, "RABBITMQ_URL")
    prefix = f"test-cli-{uuid.uuid4().hex[:10]}/"
    env = {"RABBITMQ_URL": RABBITMQ_URL, "IMPORTER_QUEUE_PREFIX": prefix}
    try:
        listed = importer(db_dsn, "dlq", "list", "--limit", "5", **env)
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == {"items": [], "scanned": 0, "more": False}
        replayed = importer(db_dsn, "dlq", "replay", "--job", str(uuid.uuid4()), **env)
        assert replayed.returncode == 0, replayed.stderr
        assert json.loads(replayed.stdout)["replayed"] == 0
    finally:
        connection = await aio_pika.connect(RABBITMQ_URL)
        try:
            channel = await connection.channel()
            for name in broker_topology(Settings(queue_prefix=prefix)).queue_arguments():
                await channel.queue_delete(name)
        finally:
            await connection.close()
