"""Helpers shared by the integration and acceptance tiers."""

from __future__ import annotations

import csv
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.storage.files import LocalFileSource
from importer.core.layout import Layout, parse_layout
from importer.core.models import Channel, ConflictStrategy, InputFormat
from importer.core.reference import CREATED_PREFIX, ContactState
from importer.services.local import ImportOutcome, ImportRequest, import_source
from importer.services.runs import format_for
from importer.settings import Settings


def write_csv(
    path: Path, header: Sequence[str], rows: Sequence[Sequence[str]], delimiter: str = ","
) -> Path:
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
    return path


async def import_file(
    dsn: str,
    path: Path,
    client_id: int,
    strategy: ConflictStrategy = ConflictStrategy.MERGE,
    *,
    chunk_size: int = 500,
    concurrency: int = 2,
    layout: Layout | None = None,
    input_format: InputFormat | None = None,
    layout_document: dict[str, object] | None = None,
    max_invalid: str | None = None,
    preview: bool = False,
    duplicates_report: bool = True,
) -> ImportOutcome:
    """Run a whole import in this process against ``dsn`` and check the counter identity.
    ``layout_document``: the job's stored layout (its merge policy, its key), parsed when
    ``layout`` is not given."""
    settings = Settings(database_url=dsn, chunk_size=chunk_size, concurrency=concurrency)
    if layout is None and layout_document is not None:
        layout = parse_layout(layout_document)
    request = ImportRequest(
        client_id=client_id,
        strategy=strategy,
        input_format=input_format or format_for(path.name),
        chunk_size=chunk_size,
        concurrency=concurrency,
        layout=layout,
        layout_document=layout_document,
        max_invalid=max_invalid,
        preview=preview,
        duplicates_report=duplicates_report,
    )
    pool = await connect_pool(dsn, concurrency + 2)  # + the client's turn, + one
    try:
        outcome = await import_source(
            PostgresJobQueue(pool), LocalFileSource(path), request, settings
        )
    finally:
        await pool.close()
    assert outcome.counters.balanced, outcome.counters
    return outcome


async def db_state(dsn: str, client_id: int) -> dict[str, ContactState]:
    """The client's live contacts in the reference model's shape."""
    conn = await asyncpg.connect(dsn)
    try:
        state = {
            r["cpf_cnpj"]: ContactState(r["name"], r["street_address"])
            for r in await conn.fetch(
                "SELECT cpf_cnpj, name, street_address FROM contact"
                " WHERE client_id = $1 AND deleted_at IS NULL",
                client_id,
            )
        }
        for r in await conn.fetch(
            "SELECT c.cpf_cnpj, d.channel_id, d.value FROM contact_details d"
            " JOIN contact c ON c.id = d.contact_id"
            " WHERE c.client_id = $1 AND c.deleted_at IS NULL AND d.deleted_at IS NULL",
            client_id,
        ):
            state[r["cpf_cnpj"]].details.add((Channel(r["channel_id"]), r["value"]))
        for r in await conn.fetch(
            "SELECT c.cpf_cnpj, lower(f.name) AS field, v.value FROM contact_custom_fields v"
            " JOIN contact c ON c.id = v.contact_id JOIN custom_field f ON f.id = v.custom_field_id"
            " WHERE c.client_id = $1 AND c.deleted_at IS NULL",
            client_id,
        ):
            state[r["cpf_cnpj"]].custom_fields[r["field"]] = r["value"]
        return state
    finally:
        await conn.close()


Contact = tuple[object, ...]  # a contact compared by its values: (cpf, name, address, ...)


def contact_values(cpf: str | None, state: ContactState) -> Contact:
    return (
        cpf,
        state.name,
        state.street_address,
        tuple(sorted((int(c), v) for c, v in state.details)),
        tuple(sorted(state.custom_fields.items())),
    )


def model_contacts(states: Mapping[str, ContactState]) -> list[Contact]:
    """The reference model's contacts of a client as a sorted list of their values (a contact a
    channel-keyed import created has no CPF: its identity is the model's own)."""
    return sorted(
        (
            contact_values(None if key.startswith(CREATED_PREFIX) else key, state)
            for key, state in states.items()
        ),
        key=repr,
    )


async def db_contacts(dsn: str, client_id: int) -> list[Contact]:
    """The client's live contacts as :func:`model_contacts` has them (for contacts without a CPF,
    whose ``db_state`` keys would meet)."""
    conn = await asyncpg.connect(dsn)
    try:
        states: dict[int, tuple[str | None, ContactState]] = {
            r["id"]: (r["cpf_cnpj"], ContactState(r["name"], r["street_address"]))
            for r in await conn.fetch(
                "SELECT id, cpf_cnpj, name, street_address FROM contact"
                " WHERE client_id = $1 AND deleted_at IS NULL",
                client_id,
            )
        }
        for r in await conn.fetch(
            "SELECT d.contact_id, d.channel_id, d.value FROM contact_details d"
            " JOIN contact c ON c.id = d.contact_id"
            " WHERE c.client_id = $1 AND c.deleted_at IS NULL AND d.deleted_at IS NULL",
            client_id,
        ):
            states[r["contact_id"]][1].details.add((Channel(r["channel_id"]), r["value"]))
        for r in await conn.fetch(
            "SELECT v.contact_id, lower(f.name) AS field, v.value FROM contact_custom_fields v"
            " JOIN contact c ON c.id = v.contact_id JOIN custom_field f ON f.id = v.custom_field_id"
            " WHERE c.client_id = $1 AND c.deleted_at IS NULL",
            client_id,
        ):
            states[r["contact_id"]][1].custom_fields[r["field"]] = r["value"]
    finally:
        await conn.close()
    return sorted((contact_values(cpf, state) for cpf, state in states.values()), key=repr)


async def fetch(dsn: str, query: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


async def finalization_counts(dsn: str, job_id: uuid.UUID) -> tuple[int, int]:
    """(import_batch_finalized rows, notification outbox rows) of a job."""
    rows = await fetch(
        dsn,
        "SELECT (SELECT count(*) FROM import_batch_finalized WHERE batch_id = $1) AS fin,"
        " (SELECT count(*) FROM outbox WHERE topic = 'notification'"
        "  AND payload->>'job_id' = $1::text) AS notes",
        job_id,
    )
    return rows[0]["fin"], rows[0]["notes"]


def cpf(base: int) -> str:
    """A valid CPF (11 digits) built from a 9-digit base by the published check-digit rule."""
    digits = [int(c) for c in f"{base:09d}"]
    for weight_start in (10, 11):
        total = sum(d * w for d, w in zip(digits, range(weight_start, 1, -1), strict=False))
        remainder = total % 11
        digits.append(0 if remainder < 2 else 11 - remainder)
    return "".join(map(str, digits))


def bad_cpf(base: int) -> str:
    """A CPF whose last check digit is wrong."""
    good = cpf(base)
    return good[:-1] + str((int(good[-1]) + 1) % 10)


CONTACT_TABLES = ("contact", "contact_details", "contact_custom_fields", "custom_field")


async def tables_checksum(dsn: str) -> dict[str, str]:
    """An md5 of every row of the contact tables (all clients, every column, by id): equal
    before and after means byte-identical contents."""
    conn = await asyncpg.connect(dsn)
    try:
        return {
            table: await conn.fetchval(
                f"SELECT md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t.id), '')) "
                f"FROM {table} t"
            )
            for table in CONTACT_TABLES
        }
    finally:
        await conn.close()


_LIVE_ROWS = {
    "contact": "SELECT t::text AS r, t.id FROM contact t"
    " WHERE t.client_id = $1 AND t.deleted_at IS NULL",
    "contact_details": "SELECT t::text AS r, t.id FROM contact_details t"
    " JOIN contact c ON c.id = t.contact_id"
    " WHERE c.client_id = $1 AND c.deleted_at IS NULL AND t.deleted_at IS NULL",
    "contact_custom_fields": "SELECT t::text AS r, t.id FROM contact_custom_fields t"
    " JOIN contact c ON c.id = t.contact_id WHERE c.client_id = $1 AND c.deleted_at IS NULL",
    "custom_field": "SELECT t::text AS r, t.id FROM custom_field t WHERE t.client_id = $1",
}


async def live_checksum(dsn: str, client_id: int) -> dict[str, str]:
    """An md5 of every live row of a client's contact tables, every column, by id (the contacts
    not soft-deleted and their live channels, their custom values, the client's custom fields):
    equal before an import and after its undo means byte-identical live contents."""
    conn = await asyncpg.connect(dsn)
    try:
        return {
            table: await conn.fetchval(
                f"SELECT md5(coalesce(string_agg(r, E'\\n' ORDER BY id), '')) FROM ({query}) q",
                client_id,
            )
            for table, query in _LIVE_ROWS.items()
        }
    finally:
        await conn.close()


@dataclass
class BytesSource:
    """Bytes as the pipeline's Source, read in blocks of the size asked for."""

    name: str
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)

    async def blocks(self, block_size: int) -> AsyncIterator[bytes]:
        for start in range(0, len(self.data), block_size):
            yield self.data[start : start + block_size]
