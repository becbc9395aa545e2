"""The sweeps that keep the importer's tables bounded (issue 26), for a worker and for
``importer maintenance``.

Every table an import or an event adds rows to is swept here or capped where it is written:

* an ended import, ``IMPORTER_RETENTION_DAYS`` after its end: its uploaded file, the raw values
  of its reports, its undo journal and merge marks, its chunk ledger and lanes (one transaction
  per import, :meth:`JobQueue.purge_job`);
* published outbox messages (and, without a broker, the ones nobody will publish) after
  ``IMPORTER_OUTBOX_RETENTION_DAYS``;
* ended webhook deliveries and their attempts after ``IMPORTER_WEBHOOK_RETENTION_DAYS``;
* the error report: at most ``IMPORTER_MAX_ROW_ERRORS`` rows per import, the rest counted
  (``import_error_tally``, written by the batches themselves).

The table sweeps delete in batches of :data:`SWEEP_BATCH` rows, one short transaction each,
never a long lock; a sweep stops after :data:`SWEEP_ROUNDS` batches per table (the next sweep
goes on). The job row, its finalization row and its report's lines and reasons stay: the
import's history. No driver here: the sweeps talk to the ``JobQueue`` and ``ObjectStore``
ports.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from importer.core.errors import ObjectNotFoundError
from importer.ports import JobQueue, ObjectStore
from importer.services.local import S3_SCHEME
from importer.settings import Settings

RETENTION_BATCH = 100  # ended imports read per round of the retention sweep
SWEEP_BATCH = 1_000  # outbox messages or webhook deliveries deleted per transaction
SWEEP_ROUNDS = 100  # rounds (batches) per table and sweep at most: the next sweep goes on
PREVIEW_ROUNDS = 100  # rounds of preview expiry (of 100 each) per maintenance run at most


@dataclass(frozen=True, slots=True)
class Swept:
    """What one retention sweep removed: imports purged, their stored files, raw report values,
    undo journal rows, ledger and lane rows; outbox messages and webhook deliveries deleted."""

    jobs: int = 0
    objects: int = 0
    raw_values: int = 0
    journal_rows: int = 0
    ledger_rows: int = 0
    outbox: int = 0
    webhooks: int = 0


def _days_before(now: dt.datetime, days: int) -> dt.datetime:
    return now - dt.timedelta(days=days)


async def sweep_retention(
    store: JobQueue, objects: ObjectStore, settings: Settings, now: dt.datetime
) -> Swept:
    """Purge the imports past their retention, then sweep the outbox and the webhook
    deliveries past theirs (see the module's docstring). A store's or the object store's
    failure raises: what was committed before it stays."""
    purged = await _purge_imports(store, objects, _days_before(now, settings.retention_days), now)
    outbox_before = _days_before(now, settings.outbox_retention_days)
    unpublished = settings.rabbitmq_url is None  # no relay will ever publish them

    async def outbox_batch(limit: int) -> int:
        return await store.sweep_outbox(outbox_before, limit, unpublished=unpublished)

    webhooks_before = _days_before(now, settings.webhook_retention_days)

    async def webhooks_batch(limit: int) -> int:
        return await store.sweep_webhooks(webhooks_before, limit)

    outbox = await _in_batches(outbox_batch)
    webhooks = await _in_batches(webhooks_batch)
    return Swept(
        purged.jobs,
        purged.objects,
        purged.raw_values,
        purged.journal_rows,
        purged.ledger_rows,
        outbox,
        webhooks,
    )


async def _in_batches(batch: Callable[[int], Awaitable[int]]) -> int:
    """Run ``batch`` (one transaction of at most SWEEP_BATCH rows) until one comes back short."""
    deleted = 0
    for _ in range(SWEEP_ROUNDS):
        count = await batch(SWEEP_BATCH)
        deleted += count
        if count < SWEEP_BATCH:
            break
    return deleted


async def _purge_imports(
    store: JobQueue, objects: ObjectStore, cutoff: dt.datetime, now: dt.datetime
) -> Swept:
    """Each import that ended before ``cutoff`` and is not purged: its uploaded file (a command
    line's file or S3 URL is not the service's to delete), then its rows in one transaction."""
    jobs = files = raw_values = journal_rows = ledger_rows = 0
    for _ in range(SWEEP_ROUNDS):
        due = await store.retention_due(cutoff, RETENTION_BATCH)
        for job in due:
            if job.local_path is None and not job.source.startswith(S3_SCHEME):
                with contextlib.suppress(ObjectNotFoundError):
                    await objects.delete(job.source)
                    files += 1
            purged = await store.purge_job(job.job_id, now)
            jobs += purged.jobs
            raw_values += purged.raw_values
            journal_rows += purged.journal_rows
            ledger_rows += purged.ledger_rows
        if len(due) < RETENTION_BATCH:
            break
    return Swept(jobs, files, raw_values, journal_rows, ledger_rows)


async def expire_previews(store: JobQueue) -> int:
    """Cancel every preview past its time to live (a batch of 100 per round); how many."""
    expired = 0
    for _ in range(PREVIEW_ROUNDS):
        count = await store.expire_previews()
        expired += count
        if count < 100:  # jobs.expire_previews' batch
            break
    return expired
