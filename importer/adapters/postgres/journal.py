"""The undo journal of a batch (issue 15), written in the batch's transaction: the before-image
of every stored contact's value the batch changes, the channels it adds to them, and the ids
of the contacts it creates — one ``import_journal`` row per batch, in one statement
(``queries/journal.sql``), only when the batch creates contacts or changes stored ones.

The before-images are the stored contacts the batch planned against (``merge.StoredContact``,
read in the same transaction, before any write): the journal reads nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

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
    stored: Iterable[merge.StoredContact],
    field_ids: Mapping[str, int],
) -> None:
    """Journal what ``plan`` is about to change of ``stored`` (the contacts it planned against;
    call it before the plan's writes); ``created``: the ids of the contacts it creates."""
    contacts, customs, details = journal_arrays(job, plan, stored, field_ids)
    if created or contacts[0] or customs[0] or details[0]:
        await conn.execute(
            q["journal_batch"], job.id, *batch, created, *contacts, *customs, *details
        )


Arrays = list[Sequence[object]]


def journal_arrays(
    job: Job,
    plan: merge.BatchPlan,
    stored: Iterable[merge.StoredContact],
    field_ids: Mapping[str, int],
) -> tuple[Arrays, Arrays, Arrays]:
    """The journal's parallel arrays of what ``plan`` changes of contacts that existed before
    ``job`` (one it created is soft-deleted whole by the undo): the rows before it of those whose
    name or address changes (id, name, address, updated_at); their custom values it sets
    (contact, field, before or None, after); the channels it adds (contact, channel, value)."""
    by_id = {contact.id: contact for contact in stored}
    before = {cid for cid, contact in by_id.items() if contact.import_job_id != job.id}
    contacts = [
        (cid, by_id[cid].name, by_id[cid].street_address, by_id[cid].updated_at)
        for cid in sorted({cid for cid, _, _ in plan.contact_updates} & before)
    ]
    customs = [
        (cid, field_ids[name.lower()], by_id[cid].custom_fields.get(name.lower()), value)
        for cid, name, value in (*plan.custom_inserts, *plan.custom_updates)
        if cid in before
    ]
    details = sorted(
        {(cid, int(d.channel), d.value) for cid, d in plan.detail_inserts if cid in before}
    )
    return _columns(contacts, 4), _columns(customs, 4), _columns(details, 3)


def _columns(rows: Sequence[tuple[object, ...]], width: int) -> Arrays:
    """Rows as ``width`` parameter arrays (empty ones when there are none)."""
    return list(zip(*rows, strict=True)) if rows else [()] * width
