"""The stored contacts a batch (or a preview) plans against, as ``core.merge`` takes them: read
by their CPF/CNPJ keys, or, for an import keyed by a channel (``core.keys``), by resolving each
key among the client's live contacts first (resolve_channel_keys), then reading them by id; and
the key groups a channel key's rows are partitioned by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import asyncpg

from importer.adapters.postgres.pool import Conn
from importer.core import keys, merge, policy
from importer.core.models import Channel, ContactRow, Job, RowIssue

# What a channel-keyed batch resolves by: the key channel, the job's merge policy, and the
# client's custom fields the import knows (id → lower-case name).
Resolution = tuple[Channel, policy.MergePolicy, dict[int, str]]


async def ambiguous_rows(
    conn: Conn, q: Mapping[str, str], job: Job, rows: Sequence[ContactRow], channel: Channel
) -> list[RowIssue]:
    """The ``ambiguous_key`` issues of ``rows``: those whose key two live contacts share."""
    found = await conn.fetch(
        q["resolve_channel_keys"], job.client_id, sorted({r.cpf_cnpj for r in rows}), int(channel)
    )
    shared = {r["key"] for r in found if r["matches"] > 1}
    return [keys.ambiguous_issue(r, channel) for r in rows if r.cpf_cnpj in shared]


async def resolved_batch(
    conn: Conn,
    q: Mapping[str, str],
    job: Job,
    rows: Sequence[ContactRow],
    resolution: Resolution,
) -> tuple[
    list[ContactRow], dict[str, merge.Folded], dict[str, merge.StoredContact], list[RowIssue]
]:
    """A channel key's batch: each key resolved among the client's live contacts, the rows of an
    ambiguous one refused (``ambiguous_key``), the keys of one stored contact folded together
    (``keys.unify``); the rows folded (unified), the folds and their stored contacts by
    (canonical) key, and the refused."""
    channel, rules, names = resolution
    found = await conn.fetch(
        q["resolve_channel_keys"], job.client_id, sorted({r.cpf_cnpj for r in rows}), int(channel)
    )
    contact_of = {r["key"]: r["contact_id"] for r in found if r["matches"] == 1}
    refused: list[RowIssue] = []
    if len(contact_of) < len(found):
        shared = {r["key"] for r in found if r["matches"] > 1}
        refused = [keys.ambiguous_issue(r, channel) for r in rows if r.cpf_cnpj in shared]
        rows = [r for r in rows if r.cpf_cnpj not in shared]
    unified = keys.unify(rows, contact_of)
    folded = merge.fold_rows(unified, job.strategy, rules)
    ids = sorted({contact_of[k] for k in folded if k in contact_of})
    if rules.is_default:
        records = await conn.fetch(q["find_contacts_by_id"], job.client_id, ids, list(names))
        by_id = {r["id"]: stored_contact(r, names) for r in records}
    else:
        query = q["find_contacts_by_id_with_provenance"]
        records = await conn.fetch(query, job.client_id, ids, list(names), job.id)
        by_id = {r["id"]: stored_with_provenance(r, names) for r in records}
    stored = {k: by_id[contact_of[k]] for k in folded if contact_of.get(k) in by_id}
    return unified, folded, stored, refused


async def key_groups(
    conn: Conn, q: Mapping[str, str], job: Job, channel: Channel
) -> keys.KeyGroups:
    """The job's key groups (core.keys.KeyGroups): the kept ones, else read from the client's
    contacts (bounded) and kept for the runs after it."""
    kept = await conn.fetchrow(q["load_key_groups"], job.id)
    if kept is not None:
        canonical = dict(zip(kept["key_values"], kept["canonicals"], strict=True))
        return keys.KeyGroups(canonical, kept["whole"])
    await conn.execute(q["key_group_settings"])
    found = await conn.fetch(
        q["key_group_values"], job.client_id, int(channel), keys.MAX_GROUPED_VALUES + 1
    )
    groups = keys.key_groups((r["contact_id"], r["value"]) for r in found)
    values = list(groups.canonical)
    canonicals = [groups.canonical[v] for v in values]
    await conn.execute(q["save_key_groups"], job.id, groups.whole, values, canonicals)
    return groups


def stored_with_provenance(r: asyncpg.Record, names: dict[int, str]) -> merge.StoredContact:
    """A find_contacts_with_provenance row as a stored contact with its provenance."""
    channels, field_ids = r["channels"], r["field_ids"]
    revivable = r["revivable_channels"]
    return merge.StoredContact(
        r["id"],
        r["name"],
        r["street_address"],
        frozenset(zip(channels, r["detail_values"], strict=True)) if channels else frozenset(),
        {names[i]: v for i, v in zip(field_ids, r["field_values"], strict=True)}
        if field_ids
        else {},
        r["own"],
        frozenset(r["targets"] or ()),
        frozenset(zip(revivable, r["revivable_values"], strict=True)) if revivable else frozenset(),
        r["updated_at"],
        r["import_job_id"],
    )


async def stored_contacts(
    conn: Conn, find_contacts: str, client: int, keys: list[str], names: dict[int, str]
) -> dict[str, merge.StoredContact]:
    """The stored live contacts of ``keys`` with their channels and their values of the custom
    fields ``names`` (id → lower-case name), by key."""
    records = await conn.fetch(find_contacts, client, keys, list(names))
    return {r["cpf_cnpj"]: stored_contact(r, names) for r in records}


def stored_contact(r: asyncpg.Record, names: dict[int, str]) -> merge.StoredContact:
    """A find_contacts row as a stored contact."""
    channels, values = r["channels"], r["detail_values"]
    field_ids, field_values = r["field_ids"], r["field_values"]
    return merge.StoredContact(
        r["id"],
        r["name"],
        r["street_address"],
        frozenset(zip(channels, values, strict=True)) if channels else frozenset(),
        {names[i]: v for i, v in zip(field_ids, field_values, strict=True)} if field_ids else {},
        updated_at=r["updated_at"],
        import_job_id=r["import_job_id"],
    )
