"""First contact: services that do not answer, said plainly; the services' default log level."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import asyncpg
import orjson
import pytest

from importer.core.models import TERMINAL_STATUSES, JobView
from tests.acceptance.test_admin_cli import importer
from tests.jobs_support import WAIT_S, contacts_csv, eventually, job_env, upload_job
from tests.support import cpf, write_csv

pytestmark = pytest.mark.acceptance

CLIENT = 7
SECRET = "s3cr3t-pa55"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def explained(done: subprocess.CompletedProcess[str], service: str, variable: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert f"importer: cannot reach {service} at " in done.stderr
    assert f"({variable})" in done.stderr
    assert "cause: " in done.stderr
    assert "to do: " in done.stderr
    assert SECRET not in done.stderr  # the password is masked
    assert "Traceback" not in done.stderr


def test_no_postgresql(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "c.csv", ["nome", "cpf"], [["A", cpf(6100)]])
    dsn = f"postgresql://postgres:{SECRET}@127.0.0.1:{closed_port()}/postgres"
    done = importer(dsn, "import", str(path), "--client-id", "1")
    explained(done, "PostgreSQL", "DATABASE_URL")
    assert "postgresql://postgres:***@127.0.0.1:" in done.stderr
    assert "ConnectionRefusedError" in done.stderr
    assert "importer db migrate" in done.stderr  # the README's way to a local server
    for args in (("db", "migrate"), ("status", "7c1f44e0-0000-4000-8000-000000000000")):
        explained(importer(dsn, *args), "PostgreSQL", "DATABASE_URL")
    served = importer(dsn, "serve", "--port", str(free_port()), JWT_SECRET="x" * 40)
    explained(served, "PostgreSQL", "DATABASE_URL")  # no traceback from uvicorn's start-up
    assert "Application startup failed" not in served.stderr


def test_no_rabbitmq(db_dsn: str) -> None:
    url = f"amqp://guest:{SECRET}@127.0.0.1:{closed_port()}/"
    done = importer(db_dsn, "dlq", "list", RABBITMQ_URL=url)
    explained(done, "RabbitMQ", "RABBITMQ_URL")
    assert "amqp://guest:***@127.0.0.1:" in done.stderr


def test_no_s3(db_dsn: str) -> None:
    env = {
        "S3_ENDPOINT_URL": f"http://127.0.0.1:{closed_port()}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
    }
    done = importer(db_dsn, "import", "s3://bucket/k.csv", "--client-id", "1", **env)
    explained(done, "S3", "S3_ENDPOINT_URL")
    assert "EndpointConnectionError" in done.stderr


async def test_no_redis_is_a_warning_and_the_worker_runs(db_dsn: str, tmp_path: Path) -> None:
    environ = {**os.environ, "DATABASE_URL": db_dsn, "IMPORTER_LOG_FORMAT": "json"}
    environ["REDIS_URL"] = f"redis://:{SECRET}@127.0.0.1:{closed_port()}/0"
    for name in ("IMPORTER_LOG_LEVEL", "RABBITMQ_URL", "S3_ENDPOINT_URL"):
        environ.pop(name, None)
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "importer", "worker", env=environ, stderr=asyncio.subprocess.PIPE
    )
    assert worker.stderr is not None
    try:
        line = await asyncio.wait_for(worker.stderr.readline(), WAIT_S)
        while b"redis_unreachable" not in line and line:
            line = await asyncio.wait_for(worker.stderr.readline(), WAIT_S)
    finally:
        worker.send_signal(signal.SIGTERM)
        rest = await asyncio.wait_for(worker.stderr.read(), WAIT_S)
        code = await asyncio.wait_for(worker.wait(), WAIT_S)
    event = orjson.loads(line)
    assert event["level"] == "warning"
    assert event["url"].startswith("redis://:***@127.0.0.1:")
    assert "REDIS_URL" in event["hint"]
    assert SECRET not in (line + rest).decode()
    assert code == 0, rest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("command", ["worker", "serve"])
async def test_services_log_their_canonical_lines_by_default(
    db_dsn: str, tmp_path: Path, command: str
) -> None:
    """No IMPORTER_LOG_LEVEL: serve and worker still write `job_finished` (info)."""
    log_path = tmp_path / f"{command}.log"
    environ = {
        **os.environ,
        "DATABASE_URL": db_dsn,
        "IMPORTER_STORAGE_DIR": str(tmp_path / "objects"),
        "IMPORTER_LOG_FORMAT": "json",
        "JWT_SECRET": "x" * 40,
    }
    for name in ("IMPORTER_LOG_LEVEL", "S3_ENDPOINT_URL", "RABBITMQ_URL", "REDIS_URL"):
        environ.pop(name, None)
    args = ["worker"] if command == "worker" else ["serve", "--port", str(free_port())]
    async with job_env(db_dsn, tmp_path) as env:
        job_id = await upload_job(env, CLIENT, contacts_csv(tmp_path / "c.csv", 30))
        with log_path.open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "importer", *args, env=environ, stderr=log, stdout=log
            )
            try:
                await env.views.start_job(CLIENT, job_id, "op-1")

                async def finished() -> JobView | None:
                    view = await env.views.view_job(CLIENT, job_id)
                    return view if view.status in TERMINAL_STATUSES else None

                await eventually(finished)

                async def logged() -> bool | None:
                    return b'"job_finished"' in log_path.read_bytes() or None

                await eventually(logged)
            finally:
                process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(process.wait(), WAIT_S)
    events = [orjson.loads(line) for line in log_path.read_bytes().splitlines() if line[:1] == b"{"]
    done = next(e for e in events if e["event"] == "job_finished")
    assert done["job_id"] == str(job_id)
    assert any(e["event"] == "chunk_applied" for e in events)


def test_the_command_line_prints_no_log_lines_by_default(db_dsn: str, tmp_path: Path) -> None:
    path = write_csv(tmp_path / "c.csv", ["nome", "cpf"], [["A", cpf(6200)], ["B", cpf(6201)]])
    environ = {k: v for k, v in os.environ.items() if k != "IMPORTER_LOG_LEVEL"}
    done = subprocess.run(
        [sys.executable, "-m", "importer", "import", str(path), "--client-id", "1", "--json"],
        env={**environ, "DATABASE_URL": db_dsn},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # Only the job's id (what `importer job resume` needs if the run is interrupted): no log line.
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("importer: import "), done.stderr
    assert orjson.loads(done.stdout)["status"] == "completed"


async def test_a_database_without_the_schema_or_missing(db_dsn: str, tmp_path: Path) -> None:
    path = write_csv(tmp_path / "c.csv", ["nome", "cpf"], [["A", cpf(6300)]])
    name = f"importer_empty_{os.getpid()}"
    admin = db_dsn.rsplit("/", 1)[0] + "/postgres"
    connection = await asyncpg.connect(admin)
    try:
        await connection.execute(f'CREATE DATABASE "{name}"')
        empty = importer(
            db_dsn.rsplit("/", 1)[0] + f"/{name}", "import", str(path), "--client-id", "1"
        )
    finally:
        await connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await connection.close()
    assert empty.returncode == 2
    assert "run `importer db migrate`" in empty.stderr, empty.stderr
    missing = importer(db_dsn.rsplit("/", 1)[0] + "/importer_no_such_db", "history")
    assert missing.returncode == 2
    assert "does not exist: create it" in missing.stderr, missing.stderr
