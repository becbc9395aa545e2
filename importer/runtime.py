"""The one place that wires adapters to ports for the command line."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path

from importer.adapters.files import LocalFileSource
from importer.adapters.localstore import LocalObjectStore
from importer.adapters.postgres import PostgresStore, connect_pool, migrate
from importer.ports import ObjectStore, Progress
from importer.report import write_csv_report
from importer.service import ImportOutcome, ImportRequest, import_source
from importer.settings import Settings


@contextlib.asynccontextmanager
async def stop_on_signals() -> AsyncIterator[asyncio.Event]:
    """An event set by SIGINT or SIGTERM: the run finishes its in-flight batches and stops."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        yield stop
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def object_store(settings: Settings) -> ObjectStore:
    """S3 when an endpoint is configured, else the local directory; the one place choosing."""
    if settings.s3_endpoint_url is None:
        return LocalObjectStore(Path(settings.storage_dir))
    # Imported here: botocore adds ~0.15 s to every start of a CLI that may never touch S3.
    from importer.adapters.s3 import S3ObjectStore

    return S3ObjectStore(
        bucket=settings.bucket,
        endpoint_url=settings.s3_endpoint_url,
        region=settings.aws_region,
        access_key_id=settings.aws_access_key_id,
        secret_access_key=settings.aws_secret_access_key,
    )


async def run_migrate(settings: Settings) -> None:
    await migrate(settings.database_url)


async def run_import(
    settings: Settings,
    path: Path,
    request: ImportRequest,
    progress: Progress | None,
    errors_out: Path | None,
) -> ImportOutcome:
    """Import one local file in this process; write the error report when asked."""
    source = LocalFileSource(path)
    pool = await connect_pool(settings.database_url, request.concurrency + 1)
    try:
        store = PostgresStore(pool)
        async with stop_on_signals() as stop:
            outcome = await import_source(store, source, request, settings, progress, stop)
        if errors_out is not None:
            with errors_out.open("w", encoding="utf-8", newline="") as out:
                await write_csv_report(store.row_issues(outcome.job_id), out)
        return outcome
    finally:
        await pool.close()
