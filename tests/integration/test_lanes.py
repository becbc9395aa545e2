"""Lanes on the real PostgreSQL: batches delivered in any order, to any number of concurrent
appliers, land exactly as an in-order import does (the multi-instance mode's ordering)."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from importer.adapters.postgres.queue import PostgresJobQueue
from importer.core.config import PipelineConfig
from importer.core.errors import LaneNotReadyError
from importer.core.models import Batch, Counters, Job, JobStatus, Limits
from importer.pipeline.applier import BatchApplier
from importer.read.blocks import BlockParser
from tests.integration.test_poison_rows import POISON, contacts, forbid_poison, write
from tests.jobs_support import Env, as_tuple, contacts_csv, job_env, ledger, upload_job
from tests.support import db_state, fetch, import_file

pytestmark = pytest.mark.integration

PARTITIONS = 3


@pytest.fixture
async def env(db_dsn: str, tmp_path: Path) -> AsyncIterator[Env]:
    async with job_env(db_dsn, tmp_path) as opened:
        yield opened


async def importing_job(env: Env, client: int, path: Path) -> Job:
    job_id = await upload_job(env, client, path, chunk_size=9, partitions=PARTITIONS)
    for status in (JobStatus.QUEUED, JobStatus.NORMALIZING, JobStatus.IMPORTING):
        await env.store.transition(job_id, status)
    return await env.store.get_job(job_id)


async def batches_of(env: Env, job: Job, path: Path) -> list[Batch]:
    parser = BlockParser(job, path.name, PipelineConfig(limits=Limits()))
    parser.push(await asyncio.to_thread(path.read_bytes))
    out: list[Batch] = []
    while (pulled := parser.pull()) is not None:
        out += pulled
    out += parser.finish()
    await env.store.ensure_custom_fields(job, parser.chunker.take_new_custom_names())
    return out


async def test_a_lane_takes_its_chunks_in_order_once(env: Env, tmp_path: Path) -> None:
    path = contacts_csv(tmp_path / "c.csv", 60)
    job = await importing_job(env, 1, path)
    batches = await batches_of(env, job, path)
    lane0 = [b for b in batches if b.partition == 0]
    with pytest.raises(LaneNotReadyError):  # no lanes yet: the job was not opened for them
        await env.store.apply_batch(job, lane0[0], lane=True)
    await env.store.open_lanes(job.id, PARTITIONS)
    with pytest.raises(LaneNotReadyError) as waiting:
        await env.store.apply_batch(job, lane0[1], lane=True)
    assert waiting.value.position == 0
    assert await env.store.apply_batch(job, lane0[0], lane=True) is not None
    assert await env.store.apply_batch(job, lane0[0], lane=True) is None  # a repeat: no-op
    assert await env.store.apply_batch(job, lane0[1], lane=True) is not None
    assert await env.store.lanes_behind(job.id) == 0  # lanes 1 and 2 have not moved
    await env.store.open_lanes(job.id, PARTITIONS)  # idempotent: lanes keep their place
    with pytest.raises(LaneNotReadyError):
        await env.store.apply_batch(job, lane0[3], lane=True)


async def test_any_delivery_order_gives_the_in_order_result(
    env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    path = contacts_csv(tmp_path / "c.csv", 400)
    ordered, shuffled = next(client_ids), next(client_ids)
    reference = await importing_job(env, ordered, path)
    for batch in await batches_of(env, reference, path):
        assert await env.store.apply_batch(reference, batch) is not None

    job = await importing_job(env, shuffled, path)
    batches = await batches_of(env, job, path)
    await env.store.open_lanes(job.id, PARTITIONS)
    deliveries = batches + random.Random(7).sample(batches, 40)  # with duplicates
    random.Random(11).shuffle(deliveries)
    work: asyncio.Queue[Batch] = asyncio.Queue()
    for batch in deliveries:
        work.put_nowait(batch)

    async def applier() -> None:  # a batch not ready goes back to the tail, as a consumer does
        while not work.empty():
            batch = work.get_nowait()
            try:
                await env.store.apply_batch(job, batch, lane=True)
            except LaneNotReadyError:
                work.put_nowait(batch)
                await asyncio.sleep(0.001)

    await asyncio.wait_for(asyncio.gather(*(applier() for _ in range(6))), 60)
    assert as_tuple(await ledger(env.dsn, job.id)) == as_tuple(await ledger(env.dsn, reference.id))
    assert await db_state(env.dsn, shuffled) == await db_state(env.dsn, ordered)
    assert await env.store.lanes_behind(job.id) == max(b.chunk_no for b in batches) + 1


async def test_lanes_of_a_resumed_job_start_after_its_committed_prefix(
    env: Env, tmp_path: Path
) -> None:
    path = contacts_csv(tmp_path / "c.csv", 100)
    job = await importing_job(env, 3, path)
    batches = await batches_of(env, job, path)
    done = [b for b in batches if (b.chunk_no, b.partition) in {(0, 0), (1, 0), (3, 0), (0, 1)}]
    for batch in done:  # an in-process run got this far
        await env.store.apply_batch(job, batch)
    await env.store.open_lanes(job.id, PARTITIONS)
    again = next(b for b in batches if (b.chunk_no, b.partition) == (1, 0))
    assert await env.store.apply_batch(job, again, lane=True) is None
    with pytest.raises(LaneNotReadyError) as lane0:
        await env.store.apply_batch(job, batches[-1], lane=True)
    positions = {}
    for partition in range(PARTITIONS):
        probe = Batch(10_000, partition, 1, 0, ())
        with pytest.raises(LaneNotReadyError) as at:
            await env.store.apply_batch(job, probe, lane=True)
        positions[partition] = at.value.position
    assert positions == {0: 2, 1: 1, 2: 0}
    assert lane0.value.position is not None
    assert uuid.UUID(str(job.id))  # the job is untouched otherwise


async def test_a_poison_row_in_a_lane_is_rejected_alone_even_across_deliveries(
    db_dsn: str, env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    """A lane batch the database refuses splits down to its poison row; a delivery that dies
    mid-split leaves pieces that the next delivery of the batch skips (LaneSplitError path)."""
    await forbid_poison(db_dsn)
    rows = contacts({30, 31, 170})
    path = write(tmp_path / "p.csv", rows)
    ordered, laned = next(client_ids), next(client_ids)
    expected = await import_file(db_dsn, path, ordered, chunk_size=9, concurrency=PARTITIONS)

    job = await importing_job(env, laned, path)
    batches = await batches_of(env, job, path)
    await env.store.open_lanes(job.id, PARTITIONS)
    poisoned = next(b for b in batches if any(r.name == POISON for r in b.rows))
    dying = BatchApplier(DyingStore(env.pool), job, max_attempts=1, lane=True)
    for batch in (b for b in batches if b.partition == poisoned.partition):
        if batch is poisoned:
            with pytest.raises(RuntimeError, match="died"):
                await dying.apply(batch)  # one piece committed, then the process died
            break
        await dying.apply(batch)
    parts = await fetch(db_dsn, "SELECT part FROM import_chunk WHERE job_id = $1", job.id)
    assert any(r["part"] > 1 for r in parts)
    applier = BatchApplier(env.store, job, max_attempts=1, lane=True)
    for batch in batches:  # every batch delivered again, in file order
        await applier.apply(batch)
    got = await ledger(env.dsn, job.id)
    assert as_tuple(got) == as_tuple(expected.counters)
    assert await db_state(db_dsn, laned) == await db_state(db_dsn, ordered)
    assert await env.store.lanes_behind(job.id) == max(b.chunk_no for b in batches) + 1


class DyingStore(PostgresJobQueue):
    """Dies (like a killed process) on the second piece it applies."""

    pieces = 0

    async def apply_batch(self, job: Job, batch: Batch, *, lane: bool = False) -> Counters | None:
        if batch.part > 1:
            self.pieces += 1
            if self.pieces == 2:
                raise RuntimeError("the process died")
        return await super().apply_batch(job, batch, lane=lane)


async def test_given_up_error_names_given_up_batches_only(
    db_dsn: str, env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    """What a redelivered copy of a batch is asked (fanout: dead-letter it again?): the error of
    a batch given up after its retries; nothing for an applied batch or a row rejected alone."""
    await forbid_poison(db_dsn)
    path = write(tmp_path / "p.csv", contacts({4}))
    job = await importing_job(env, next(client_ids), path)
    batches = await batches_of(env, job, path)
    await env.store.open_lanes(job.id, PARTITIONS)
    poisoned = next(b for b in batches if any(r.name == POISON for r in b.rows))
    partition = (poisoned.partition + 1) % PARTITIONS
    lane = sorted((b for b in batches if b.partition == partition), key=lambda b: b.chunk_no)
    given_up, applied = lane[0], lane[1]
    await env.store.discard_batch(job, given_up, 4, "lock timeout", lane=True)
    assert await env.store.apply_batch(job, applied, lane=True) is not None
    assert await env.store.given_up_error(job.id, given_up) == "lock timeout"
    assert await env.store.given_up_error(job.id, applied) is None
    rejecting = BatchApplier(env.store, job, max_attempts=1)
    await rejecting.apply(poisoned)  # split down to the poison row, rejected alone
    assert rejecting.discarded_error is None
    assert await env.store.given_up_error(job.id, poisoned) is None
