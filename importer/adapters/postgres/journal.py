"""The undo journal of a batch (issue 15), written in the batch's transaction: the before-image
of every stored contact's value the batch changes, the channels it adds to them, and the ids
of the contacts it creates (``queries/journal.sql``). A few set-based statements per batch,
only for what the batch does to contacts that existed before the import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from importer.adapters.postgres.pool import Conn
from importer.core import merge
from importer.core.models import Job

BatchKey = tuple[int, int, int]  # (chunk_no, partition, part)


async def write_journal(
    conn: Conn,
    q: Mapping[str, str],
    job: Job,
    batch: BatchKey,
    plan: merge.BatchPlan,
    created: Sequence[int],
    field_ids: Mapping[str, int],
) -> None:
    """Journal what ``plan`` is about to change (call it before the plan's updates)."""
    if created:
        await conn.execute(q["journal_created"], job.id, *batch, list(created))
    if plan.contact_updates:
        ids = sorted({cid for cid, _, _ in plan.contact_updates})
        await conn.execute(q["journal_contacts"], job.id, ids)
    customs = [*plan.custom_inserts, *plan.custom_updates]
    if customs:
        rows = sorted((cid, field_ids[name.lower()], value) for cid, name, value in customs)
        await conn.execute(q["journal_customs"], job.id, *map(list, zip(*rows, strict=True)))
    if plan.detail_inserts:
        details = sorted({(cid, int(d.channel), d.value) for cid, d in plan.detail_inserts})
        await conn.execute(q["journal_details"], job.id, *map(list, zip(*details, strict=True)))
