"""Exactly-once finalization (catalog T16): twenty finalizations of one finished import racing
on the real PostgreSQL — one wins; one finalization row, one notification, one follow-up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from importer.core.config import PipelineConfig
from importer.core.models import JobStatus, Limits
from importer.read.blocks import BlockParser
from tests.jobs_support import Env, contacts_csv, job_env, upload_job
from tests.support import fetch, finalization_counts

pytestmark = pytest.mark.integration


@pytest.fixture
async def env(db_dsn: str, tmp_path: Path) -> AsyncIterator[Env]:
    async with job_env(db_dsn, tmp_path) as opened:
        yield opened


@pytest.mark.parametrize("round_", range(5))
async def test_racing_finalizations_finalize_once(env: Env, tmp_path: Path, round_: int) -> None:
    path = contacts_csv(tmp_path / "c.csv", 40)
    job_id = await upload_job(env, 50 + round_, path, chunk_size=20, partitions=2)
    for status in (JobStatus.QUEUED, JobStatus.NORMALIZING, JobStatus.IMPORTING):
        await env.store.transition(job_id, status)
    job = await env.store.get_job(job_id)
    parser = BlockParser(job, path.name, PipelineConfig(limits=Limits()))
    parser.push(await asyncio.to_thread(path.read_bytes))
    batches = []
    while (pulled := parser.pull()) is not None:
        batches += pulled
    batches += parser.finish()
    await env.store.ensure_custom_fields(job, parser.chunker.take_new_custom_names())
    for batch in batches:
        await env.store.apply_batch(job, batch)

    results = await asyncio.gather(*(env.store.finalize(job_id, None) for _ in range(20)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert winners[0].counters.rows_read == 40
    assert await finalization_counts(env.dsn, job_id) == (1, 1)
    follow_ups = await fetch(
        env.dsn,
        "SELECT count(*) AS n FROM outbox WHERE topic = 'contact-import/stats-refresh'"
        " AND payload->>'job_id' = $1",
        str(job_id),
    )
    assert follow_ups[0]["n"] == 1
