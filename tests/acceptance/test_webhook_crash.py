"""Completion webhooks survive a kill -9: `importer worker` finalizes an import (the delivery is
written in the finalization's transaction), starts its POST, and is killed while the receiver
holds the request; a second worker delivers it once the attempt's lease has passed, with the
same delivery id and the same body, and the cut attempt stays recorded without a result."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from importer.adapters.postgres.webhooks import PostgresClientWebhooks
from importer.core.webhooks import signature_matches
from tests.jobs_support import WAIT_S, contacts_csv, eventually, job_env, upload_job
from tests.support import fetch
from tests.webhook_receiver import HANG, receiving

pytestmark = pytest.mark.acceptance

CLIENT = 17
SECRET = "acceptance-secret-0123456789"


def worker_environ(dsn: str, tmp_path: Path) -> dict[str, str]:
    environ = {
        **os.environ,
        "DATABASE_URL": dsn,
        "IMPORTER_STORAGE_DIR": str(tmp_path / "objects"),
        "IMPORTER_LOG_FORMAT": "json",
        "IMPORTER_LOG_LEVEL": "info",
        "IMPORTER_WEBHOOK_ALLOW_PRIVATE": "1",
        # The hung attempt is killed long before its timeout; its lease (timeout + 5 s) then
        # makes it due again for the second worker.
        "IMPORTER_WEBHOOK_TIMEOUT_S": "3",
    }
    environ.pop("S3_ENDPOINT_URL", None)
    environ.pop("RABBITMQ_URL", None)
    return environ


async def test_a_delivery_cut_by_kill_9_is_delivered_by_the_next_worker(
    db_dsn: str, tmp_path: Path
) -> None:
    environ = worker_environ(db_dsn, tmp_path)
    async with job_env(db_dsn, tmp_path) as env, receiving([HANG, 200]) as receiver:
        await PostgresClientWebhooks(env.pool).set(CLIENT, SECRET, None, "unused")
        job_id = await upload_job(env, CLIENT, contacts_csv(tmp_path / "c.csv", 30))
        await env.pool.execute(
            "UPDATE import_job SET notify_url = $2 WHERE id = $1", job_id, receiver.url()
        )
        with (tmp_path / "worker-1.log").open("wb") as log:
            first = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "importer", "worker", env=environ, stderr=log
            )
        try:
            await env.views.start_job(CLIENT, job_id, "op-1")
            await receiver.requests_at_least(1, WAIT_S)  # held: the attempt is in flight
        finally:
            first.send_signal(signal.SIGKILL)
            await asyncio.wait_for(first.wait(), WAIT_S)
        cut = await fetch(
            db_dsn,
            "SELECT attempt, status_code, error FROM webhook_attempt WHERE delivery_id = $1",
            f"notification:{job_id}",
        )
        assert [tuple(r) for r in cut] == [(1, None, None)]

        with (tmp_path / "worker-2.log").open("wb") as log:
            second = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "importer", "worker", env=environ, stderr=log
            )
        try:

            async def delivered() -> bool | None:
                rows = await fetch(
                    db_dsn,
                    "SELECT delivered_at IS NOT NULL AS done FROM webhook_delivery"
                    " WHERE job_id = $1",
                    job_id,
                )
                return True if rows and rows[0]["done"] else None

            requests = await receiver.requests_at_least(2, WAIT_S)
            await eventually(delivered)
        finally:
            second.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(second.wait(), WAIT_S)
    assert code == 0
    assert [r.headers["x-importer-delivery"] for r in requests] == [f"notification:{job_id}"] * 2
    assert requests[0].body == requests[1].body
    for request in requests:
        assert signature_matches(request.body, SECRET, request.headers["x-importer-signature"])
    recorded = await fetch(
        db_dsn,
        "SELECT attempt, status_code FROM webhook_attempt WHERE delivery_id = $1 ORDER BY attempt",
        f"notification:{job_id}",
    )
    assert [tuple(r) for r in recorded] == [(1, None), (2, 200)]
