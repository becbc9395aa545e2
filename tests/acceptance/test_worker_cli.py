"""`importer worker` as a user runs it: a subprocess that runs queued imports and drains on
SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import orjson
import pytest

from importer.core.models import TERMINAL_STATUSES, JobStatus, JobView
from tests.jobs_support import WAIT_S, contacts_csv, eventually, job_env, upload_job

pytestmark = pytest.mark.acceptance

CLIENT = 7


async def test_worker_runs_a_queued_import_and_exits_0_on_sigterm(
    db_dsn: str, tmp_path: Path
) -> None:
    log_path = tmp_path / "worker.log"
    environ = {
        **os.environ,
        "DATABASE_URL": db_dsn,
        "IMPORTER_STORAGE_DIR": str(tmp_path / "objects"),
        "IMPORTER_LOG_FORMAT": "json",
        "IMPORTER_LOG_LEVEL": "info",
    }
    environ.pop("S3_ENDPOINT_URL", None)
    async with job_env(db_dsn, tmp_path) as env:
        job_id = await upload_job(env, CLIENT, contacts_csv(tmp_path / "c.csv", 50))
        with log_path.open("wb") as log:
            worker = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "importer", "worker", env=environ, stderr=log
            )
            try:
                await env.views.start_job(CLIENT, job_id, "op-1")

                async def finished() -> JobView | None:
                    view = await env.views.view_job(CLIENT, job_id)
                    return view if view.status in TERMINAL_STATUSES else None

                view = await eventually(finished)
            finally:
                worker.send_signal(signal.SIGTERM)
                code = await asyncio.wait_for(worker.wait(), WAIT_S)
    events = [orjson.loads(line) for line in log_path.read_bytes().splitlines()]
    assert code == 0, events
    assert view.status is JobStatus.COMPLETED_WITH_PLACEHOLDERS
    assert view.rows_done == 50
    names = [e["event"] for e in events]
    # The webhook delivery runs beside the workers and stops after they drained.
    assert names[-1] == "webhook_delivery_stopped"
    names = [n for n in names if not n.startswith("webhook_delivery_")]
    assert names[0] == "worker_started"
    assert names[-1] == "worker_stopped"
    done = next(e for e in events if e["event"] == "job_finished")
    assert (done["job_id"], done["ending"], done["rows_read"]) == (str(job_id), "finished", 50)
