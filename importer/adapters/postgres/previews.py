"""A preview's rows on PostgreSQL: staged as the file is read, planned key by key once it is.

The valid rows go to the unlogged ``import_preview_row`` (one binary COPY per batch, nothing
written to the contact tables); :meth:`PostgresPreviews.plan` then reads them back by key,
finds each group of keys' stored contacts with the query the batches use, and feeds the pure
:class:`importer.core.preview.PreviewBuilder` — memory bounded by a group, whatever the file.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterable, Sequence
from typing import cast

import asyncpg
import orjson

from importer.adapters.postgres import copybin
from importer.adapters.postgres.batches import copy_messages, stored_contacts
from importer.adapters.postgres.pool import Conn, pooled, translated_errors
from importer.core.models import Channel, ConflictStrategy, ContactRow, Detail
from importer.core.policy import DEFAULT_POLICY, MergePolicy
from importer.core.preview import PreviewBuilder
from importer.sql import queries

_STAGED = ("job_id", "cpf_cnpj", "line", "name", "street_address", "extra")
_STAGED_KINDS = (
    copybin.Kind.UUID,
    copybin.Kind.TEXT,
    copybin.Kind.INT4,
    copybin.Kind.TEXT,
    copybin.Kind.TEXT,
    copybin.Kind.TEXT,
)
_GROUP_ROWS = 5000  # staged rows read per round trip; a group ends at a key's last row


def _extra(row: ContactRow) -> str:
    details = [[int(d.channel), d.value, d.country_code, d.country] for d in row.details]
    return orjson.dumps({"d": details, "c": [list(pair) for pair in row.custom_fields]}).decode()


def _row(record: asyncpg.Record) -> ContactRow:
    extra = orjson.loads(record["extra"])
    return ContactRow(
        record["line"],
        record["cpf_cnpj"],
        record["name"],
        record["street_address"],
        tuple(Detail(Channel(c), v, code, country) for c, v, code, country in extra["d"]),
        tuple((name, value) for name, value in extra["c"]),
    )


class PostgresPreviews:
    """Stage a preview's rows, plan them, and clear them."""

    def __init__(self, pool: asyncpg.Pool, *, compiled: bool = True) -> None:
        self._pool = pool
        self._encode = copybin.encoder(compiled)
        self._q = queries()

    async def stage(self, job_id: uuid.UUID, rows: Sequence[ContactRow]) -> None:
        """Keep a batch's valid rows for :meth:`plan`."""
        if not rows:
            return
        records = [(job_id, r.cpf_cnpj, r.line, r.name, r.street_address, _extra(r)) for r in rows]
        payload = self._encode(_STAGED_KINDS, records)
        with translated_errors():
            async with pooled(self._pool) as conn:
                await conn.copy_to_table(
                    "import_preview_row",
                    source=cast("AsyncIterable[bytes]", copy_messages(memoryview(payload))),
                    columns=_STAGED,
                    format="binary",
                )

    async def plan(
        self,
        job_id: uuid.UUID,
        client_id: int,
        strategy: ConflictStrategy,
        fields: Sequence[str],
        *,
        policy: MergePolicy = DEFAULT_POLICY,
    ) -> PreviewBuilder:
        """Every staged key planned against its stored contact (``fields``: the custom fields the
        file names, whose stored values are compared) by the layout's merge ``policy``. The
        stored contacts are read as they are before the import: no provenance to read."""
        builder = PreviewBuilder(strategy, policy)
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction(readonly=True):
                names = await self._field_names(conn, client_id, fields)
                pending: list[ContactRow] = []
                cursor = await conn.cursor(self._q["preview_rows"], job_id)
                while records := await cursor.fetch(_GROUP_ROWS):
                    pending += [_row(r) for r in records]
                    if len(records) == _GROUP_ROWS:  # the last key may go on in the next fetch
                        last = pending[-1].cpf_cnpj
                        done = [r for r in pending if r.cpf_cnpj != last]
                        pending = [r for r in pending if r.cpf_cnpj == last]
                    else:
                        done, pending = pending, []
                    await self._plan_group(conn, builder, client_id, done, names)
                await self._plan_group(conn, builder, client_id, pending, names)
        return builder

    async def clear(self, job_id: uuid.UUID) -> None:
        with translated_errors():
            await self._pool.execute(self._q["clear_preview_rows"], job_id)

    async def save(self, job_id: uuid.UUID, document: dict[str, object]) -> None:
        with translated_errors():
            await self._pool.execute(
                self._q["save_preview"], job_id, orjson.dumps(document).decode()
            )

    async def _field_names(
        self, conn: Conn, client_id: int, fields: Sequence[str]
    ) -> dict[int, str]:
        rows = await conn.fetch(self._q["custom_field_ids"], client_id, list(fields))
        return {r["id"]: r["key"] for r in rows}

    async def _plan_group(
        self,
        conn: Conn,
        builder: PreviewBuilder,
        client_id: int,
        rows: list[ContactRow],
        names: dict[int, str],
    ) -> None:
        if not rows:
            return
        by_key: dict[str, list[ContactRow]] = {}
        for row in rows:
            by_key.setdefault(row.cpf_cnpj, []).append(row)
        stored = await stored_contacts(
            conn, self._q["find_contacts"], client_id, list(by_key), names
        )
        for key, key_rows in by_key.items():  # in key order: the rows came sorted
            builder.add(key_rows, stored.get(key))
