"""A worker's metrics and log context on the real PostgreSQL: each job's lines carry its own
job_id and client_id, the binding ends with the job, and the series count the jobs it ran."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog

from importer.adapters.storage.local import LocalObjectStore
from importer.core.models import JobStatus
from importer.metrics import PipelineMetrics
from importer.services.worker import Worker
from importer.settings import Settings
from tests.jobs_support import WAIT_S, Env, contacts_csv, job_env, upload_job

pytestmark = pytest.mark.integration


@pytest.fixture
async def env(db_dsn: str, tmp_path: Path) -> AsyncIterator[Env]:
    async with job_env(db_dsn, tmp_path) as opened:
        yield opened


async def test_each_job_s_lines_carry_its_ids_and_the_metrics_count_it(
    env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    clients = [next(client_ids), next(client_ids)]
    jobs: dict[str, int] = {}
    for n, client in enumerate(clients):
        path = contacts_csv(tmp_path / f"contacts{n}.csv", 40, first=100 * n)
        job_id = await upload_job(env, client, path, chunk_size=7, partitions=2)
        await env.views.start_job(client, job_id, f"start:{job_id}")
        jobs[str(job_id)] = client
    metrics = PipelineMetrics()
    settings = Settings(database_url=env.dsn, worker_poll_seconds=0.05, read_block_bytes=2048)
    worker = Worker(
        env.store,
        env.objects,
        settings,
        owner=f"w-{uuid.uuid4().hex[:6]}",
        stop=asyncio.Event(),
        burst=True,
        observer=metrics,
        local_files=LocalObjectStore,
    )
    with structlog.testing.capture_logs(
        processors=[structlog.contextvars.merge_contextvars]
    ) as logs:
        await asyncio.wait_for(worker.run(), WAIT_S)

    finished = [e for e in logs if e["event"] == "job_finished"]
    assert {e["job_id"]: e["client_id"] for e in finished} == jobs
    assert all(e["status"] == JobStatus.COMPLETED_WITH_PLACEHOLDERS.value for e in finished)
    assert all(e["rows_per_s"] > 0 for e in finished)
    chunk_lines = [e for e in logs if e["event"] == "chunk_applied"]
    assert chunk_lines
    assert all(jobs[e["job_id"]] == e["client_id"] for e in chunk_lines)
    own = [e for e in logs if e["event"] in ("worker_started", "worker_stopped")]
    assert len(own) == 2
    assert not any("job_id" in e or "client_id" in e for e in own)  # no job context leaked

    completed = JobStatus.COMPLETED_WITH_PLACEHOLDERS.value
    value = metrics.registry.get_sample_value
    assert value("importer_jobs_total", {"status": completed}) == 2.0
    assert value("importer_job_duration_seconds_count") == 2.0
    rows = sum(e["rows_read"] for e in finished)
    assert value("importer_phase_rows_total", {"phase": "apply"}) == rows == 80
    assert value("importer_queue_depth") == 0.0
    for client in clients:
        assert value("importer_imports_in_flight", {"client_id": str(client)}) is None
