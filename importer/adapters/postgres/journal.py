"""The undo journal of a batch (issue 15), written in the batch's transaction: the before-image
of every stored contact's value the batch changes, the channels it adds to them, and the ids
of the contacts it creates — one ``import_journal`` row per batch, in one statement
(``queries/journal.sql``), only when the batch creates contacts or changes stored ones.
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
    custom_updates: Sequence[tuple[int, int, str]],
) -> None:
    """Journal what ``plan`` is about to change (call it before the plan's updates);
    ``custom_updates``: the plan's changed custom values by field id (contact, field, value)."""
    if not (created or plan.contact_updates or plan.custom_inserts or custom_updates) and not (
        plan.detail_inserts
    ):
        return
    ids = list({cid for cid, _, _ in plan.contact_updates})
    inserts = [(cid, field_ids[name.lower()], value) for cid, name, value in plan.custom_inserts]
    details = list({(cid, int(d.channel), d.value) for cid, d in plan.detail_inserts})
    await conn.execute(
        q["journal_batch"],
        job.id,
        *batch,
        created,
        ids,
        *_columns(inserts),
        *_columns(custom_updates),
        *_columns(details),
    )


def _columns(rows: Sequence[tuple[object, object, object]]) -> list[Sequence[object]]:
    """Triples as three parameter arrays (empty ones when there are none)."""
    if not rows:
        return [(), (), ()]
    return list(zip(*rows, strict=True))
