"""Imports that feed a journey (seed 003 §9), run in this process as the API's would be: the job
is created with its ``journey_classification_contact`` (``CatalogStore.create_linked_job``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import asyncpg

from importer.adapters.postgres.catalog import CatalogStore
from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.storage.files import LocalFileSource
from importer.core.layout import parse_layout
from importer.core.models import ConflictStrategy, InputFormat, Job, JobStatus, NewJob
from importer.services.local import ImportOutcome, ImportRequest, import_source
from importer.settings import Settings
from tests.support import fetch


class JourneyQueue(PostgresJobQueue):
    """The in-process store whose new jobs feed ``journey_id`` (auto start as given)."""

    def __init__(self, pool: asyncpg.Pool, journey_id: int, auto_start: bool) -> None:
        super().__init__(pool)
        self._catalog = CatalogStore(pool)
        self._journey = (journey_id, auto_start)

    async def create_job(self, new_job: NewJob, status: JobStatus) -> Job:
        journey_id, auto_start = self._journey
        linked = dataclasses.replace(
            new_job, journey_id=journey_id, auto_start_journey_mailing=auto_start
        )
        await self._catalog.create_linked_job(linked, status, None)
        return await self.get_job(new_job.id)


async def new_journey(dsn: str, client_id: int) -> int:
    (row,) = await fetch(
        dsn, "INSERT INTO journey (client_id, name) VALUES ($1, 'j') RETURNING id", client_id
    )
    return int(row["id"])


async def import_into_journey(
    dsn: str,
    path: Path,
    client_id: int,
    journey_id: int,
    *,
    auto_start: bool = False,
    strategy: ConflictStrategy = ConflictStrategy.MERGE,
    chunk_size: int = 500,
    concurrency: int = 2,
    layout_document: dict[str, object] | None = None,
) -> ImportOutcome:
    settings = Settings(database_url=dsn, chunk_size=chunk_size, concurrency=concurrency)
    layout = parse_layout(layout_document) if layout_document is not None else None
    request = ImportRequest(
        client_id=client_id,
        strategy=strategy,
        input_format=InputFormat.CSV,
        chunk_size=chunk_size,
        concurrency=concurrency,
        layout=layout,
        layout_document=layout_document,
    )
    pool = await connect_pool(dsn, concurrency + 2)
    try:
        queue = JourneyQueue(pool, journey_id, auto_start)
        outcome = await import_source(queue, LocalFileSource(path), request, settings)
    finally:
        await pool.close()
    assert outcome.counters.balanced, outcome.counters
    return outcome


async def classification(dsn: str, job_id: object) -> asyncpg.Record:
    (row,) = await fetch(
        dsn,
        "SELECT id, status, contact_amount FROM journey_classification_contact"
        " WHERE import_job_id = $1",
        job_id,
    )
    return row


async def journey_links(dsn: str, client_id: int) -> list[tuple[object, ...]]:
    """Every journey link of the client: (classification, contact, detail, detail's value,
    whether the detail and the contact are live)."""
    rows = await fetch(
        dsn,
        "SELECT j.journey_classification_contact_id, j.contact_id, j.contact_detail_id, d.value,"
        " d.deleted_at IS NULL AND c.deleted_at IS NULL AS live"
        " FROM journey_contact j JOIN contact_details d ON d.id = j.contact_detail_id"
        " JOIN contact c ON c.id = j.contact_id WHERE j.client_id = $1 ORDER BY j.id",
        client_id,
    )
    return [tuple(r) for r in rows]
