"""A stopped run returns between batches (it never waits for the end of the file), and a resumed
run of the same job applies only what is left: the result equals one undisturbed run."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

import pytest

from importer.core.config import PipelineConfig
from importer.core.models import Counters, JobStatus, Limits, NewJob
from importer.core.reference import InMemoryStore
from importer.pipeline.run import ImportRun
from tests.support import BytesSource, cpf

ROWS = 600
CONFIG = PipelineConfig(limits=Limits(), read_block_bytes=512)


@dataclass
class StopAfterRows:
    stop: asyncio.Event
    rows: int

    def on_start(self, bytes_total: int | None) -> None:
        pass

    def on_batch(self, counters: Counters, bytes_read: int) -> None:
        if counters.rows_read >= self.rows:
            self.stop.set()


def source() -> BytesSource:
    lines = ["nome,cpf"] + [f"N{i},{cpf(i % 450)}" for i in range(ROWS)]
    return BytesSource("c.csv", ("\n".join(lines) + "\n").encode())


async def new_job(store: InMemoryStore) -> uuid.UUID:
    job_id = uuid.uuid4()
    await store.create_job(NewJob(job_id, 1, None, "c.csv", "csv", "merge", 5, 3), JobStatus.QUEUED)
    return job_id


@pytest.mark.parametrize("stop_after", [1, 40, 300])
async def test_a_stopped_run_resumes_to_the_undisturbed_result(stop_after: int) -> None:
    reference = InMemoryStore()
    whole = await ImportRun(
        await reference.get_job(await new_job(reference)), source(), reference, CONFIG
    ).run()
    assert whole is not None

    store = InMemoryStore()
    job_id = await new_job(store)
    stop = asyncio.Event()
    first = ImportRun(
        await store.get_job(job_id), source(), store, CONFIG, StopAfterRows(stop, stop_after), stop
    )
    assert await asyncio.wait_for(first.run(), 10) is None  # returns, between batches
    assert stop_after <= first.state.counters.rows_read < ROWS
    assert (await store.get_job(job_id)).status is JobStatus.IMPORTING

    second = ImportRun(await store.get_job(job_id), source(), store, CONFIG)
    finalized = await asyncio.wait_for(second.run(), 10)
    assert finalized is not None
    assert second.state.counters.rows_read == ROWS - first.state.counters.rows_read
    assert finalized.counters == whole.counters
    assert store.model.client_state(1) == reference.model.client_state(1)
