"""A preview's rows on PostgreSQL: staged as the file is read, planned once it is; and what
else a run writes outside its batches (the error report of a validation first).

The valid rows go to the unlogged ``import_preview_row`` (one binary COPY per batch, nothing
written to the contact tables). Under the default merge policy and the CPF/CNPJ key,
:meth:`PostgresPreviews.tally` has the database sum the counters and the field tallies over all
the staged keys at once (``preview_tally``), and the pure
:class:`importer.core.preview.PreviewBuilder` plans only the sample's keys. Otherwise
:meth:`PostgresPreviews.plan` (the builder's own path, and the tally's oracle in the tests)
reads the rows back by key, finds each group of keys' stored contacts with the query the
batches use, and feeds the builder — memory bounded by a group, whatever the file.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterable, Sequence
from typing import Any, cast

import asyncpg
import orjson
import structlog

from importer.adapters.postgres import copybin
from importer.adapters.postgres.batches import (
    ROW_ERROR_COLUMNS,
    copy_messages,
    issue_records,
)
from importer.adapters.postgres.contacts import stored_contact, stored_contacts
from importer.adapters.postgres.pool import Conn, pooled, translated_errors
from importer.adapters.postgres.tally import issues_within_cap
from importer.core import keys, lifecycle
from importer.core.config import DEFAULT_MAX_ROW_ERRORS
from importer.core.errors import IllegalTransitionError, LeaseLostError
from importer.core.models import (
    Channel,
    ConflictStrategy,
    ContactRow,
    Job,
    JobStatus,
    RowIssue,
    new_contact_row,
    new_detail,
)
from importer.core.policy import DEFAULT_POLICY, MergePolicy, policy_of
from importer.core.preview import SAMPLE, FieldTally, PreviewBuilder, tallied
from importer.sql import queries

_STAGED = (
    "job_id",
    "part",
    "cpf_cnpj",
    "line",
    "name",
    "street_address",
    "details",
    "custom_fields",
    "custom_values",
    "channels",
)
_STAGED_KINDS = (
    copybin.Kind.UUID,
    copybin.Kind.INT2,
    copybin.Kind.TEXT,
    copybin.Kind.INT4,
    *(copybin.Kind.TEXT,) * 5,
    copybin.Kind.INT2,
)
log = structlog.get_logger(__name__)

_GROUP_ROWS = 5000  # staged rows read per round trip; a group ends at a key's last row
_CHANNELS = {int(c): c for c in Channel}  # a dict lookup: Channel(c) is ten times slower
# The channels' ids and their target field names, as preview_tally names its tallies.
_CHANNEL_IDS = [int(c) for c in Channel]
_CHANNEL_NAMES = [f"channel:{c.name.lower()}" for c in Channel]


def _staged(job_id: uuid.UUID, part: int, row: ContactRow) -> tuple[object, ...]:
    """A row as import_preview_row stages it (schema.sql: its JSON columns)."""
    details = customs = by_name = channels = None
    if row.details:
        details = orjson.dumps(
            [(int(d.channel), d.value, d.country_code, d.country) for d in row.details]
        ).decode()
        channels = sum({1 << d.channel for d in row.details})
    if row.custom_fields:
        customs = orjson.dumps(row.custom_fields).decode()
        by_name = orjson.dumps({name.lower(): value for name, value in row.custom_fields}).decode()
    return (
        job_id,
        part,
        row.cpf_cnpj,
        row.line,
        row.name,
        row.street_address,
        details,
        customs,
        by_name,
        channels,
    )


def _summed(parts: Sequence[asyncpg.Record]) -> dict[str, FieldTally]:
    """The partitions' tallies (preview_tally's parallel arrays) summed by field."""
    summed: dict[str, FieldTally] = {}
    for part in parts:
        columns = (part["fields"], part["firsts"], part["changes"], part["kept"])
        for name, first, changed, kept in zip(*(c or () for c in columns), strict=True):
            tally = summed.setdefault(name, FieldTally())
            tally.first += first
            tally.changed += changed
            tally.kept += kept
    return summed


def _row(record: asyncpg.Record | tuple[Any, ...]) -> ContactRow:
    key, line, name, address, details, customs = record
    return new_contact_row(
        line,
        key,
        name,
        address,
        tuple(
            new_detail(_CHANNELS[c], v, code, country)
            for c, v, code, country in orjson.loads(details)
        )
        if details is not None
        else (),
        tuple((field, value) for field, value in orjson.loads(customs))
        if customs is not None
        else (),
    )


class PostgresPreviews:
    """What a run writes outside its batches: a preview's staged rows, its plan and its rest in
    ``ready``; the error report of a run that validates the whole file first; the validation's
    counts. (A base of :class:`importer.adapters.postgres.store.PostgresStore`.)"""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        compiled: bool = True,
        max_row_errors: int = DEFAULT_MAX_ROW_ERRORS,
    ) -> None:
        self._pool = pool
        self._row_error_cap = max_row_errors  # the error report's cap per job
        self._encode_rows = copybin.encoder(compiled)
        self._q = queries()

    async def stage_preview(
        self, job_id: uuid.UUID, rows: Sequence[ContactRow], partition: int = 0
    ) -> None:
        """Keep a batch's valid rows for :meth:`plan` and :meth:`tally` (``partition``: the
        batch's key partition)."""
        if not rows:
            return
        records = [_staged(job_id, partition, r) for r in rows]
        await self._copy_in("import_preview_row", _STAGED, _STAGED_KINDS, records)

    async def plan_preview(
        self, job: Job, fields: Sequence[str]
    ) -> tuple[PreviewBuilder, list[str]]:
        """The job's staged rows planned against the client's contacts (see :meth:`plan`), and
        the custom fields of ``fields`` the client does not have (the import would create)."""
        policy = policy_of(job.layout)
        channel = keys.key_channel_of(job.layout)
        if channel is not None:
            builder = await self.plan_by_channel(job, channel, fields, policy)
        elif policy.is_default:
            builder = await self.tally(
                job.id, job.client_id, job.strategy, fields, partitions=job.partitions
            )
        else:
            builder = await self.plan(job.id, job.client_id, job.strategy, fields, policy=policy)
        with translated_errors():
            rows = await self._pool.fetch(self._q["custom_field_ids"], job.client_id, list(fields))
        known = {r["key"] for r in rows}
        return builder, [name for name in fields if name.lower() not in known]

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

    async def tally(
        self,
        job_id: uuid.UUID,
        client_id: int,
        strategy: ConflictStrategy,
        fields: Sequence[str],
        *,
        partitions: int = 1,
    ) -> PreviewBuilder:
        """:meth:`plan` of the default merge policy, set-based: the database sums the counters
        and the field tallies over all the staged keys at once (``preview_tally``), each of the
        ``partitions`` key partitions the rows were staged in (the job's) on its own connection
        at the same time, as an import's partitions are applied; the builder plans the sample's
        keys only (the first ones with a change, in key order)."""
        with translated_errors():
            await self._analyze_staged()
            async with pooled(self._pool) as conn:
                names = await self._field_names(conn, client_id, fields)
            merges = strategy is ConflictStrategy.MERGE
            found = await self._tally_parts(job_id, client_id, merges, names, partitions)
            keys_of = sorted(key for part in found for key in part["sample_keys"])[:SAMPLE]
            async with pooled(self._pool) as conn:
                sample = await self._sample(conn, job_id, client_id, strategy, keys_of, names)
        rows = sum(part["rows"] or 0 for part in found)
        new_keys = sum(part["new_keys"] for part in found)
        return tallied(strategy, rows, new_keys, _summed(found), sample)

    async def _tally_parts(
        self,
        job_id: uuid.UUID,
        client_id: int,
        merges: bool,
        names: dict[int, str],
        partitions: int,
    ) -> list[asyncpg.Record]:
        """Every key partition's ``preview_tally`` row, the partitions at once (one task and one
        connection each; one failing cancels the others, its error raised as it came)."""
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [
                    group.create_task(
                        self._tally_part(job_id, client_id, merges, names, part),
                        name=f"preview_tally_{part}",
                    )
                    for part in range(partitions)
                ]
        except ExceptionGroup as failed:  # the driver's error, for translated_errors
            raise failed.exceptions[0] from failed
        return [task.result() for task in tasks]

    async def _analyze_staged(self) -> None:
        """The staging table's statistics, taken now: otherwise they are those of whichever
        preview ANALYZE last saw, and the planner may take a million staged rows for a few
        thousand (index probes instead of hash joins). Best effort: while another preview's
        ANALYZE holds the table past the lock timeout, its statistics serve."""
        try:
            await self._pool.execute(self._q["analyze_preview_rows"])
        except asyncpg.exceptions.LockNotAvailableError:
            log.info("preview_analyze_skipped", reason="lock_not_available")

    async def _tally_part(
        self,
        job_id: uuid.UUID,
        client_id: int,
        merges: bool,
        names: dict[int, str],
        part: int,
    ) -> asyncpg.Record:
        """One key partition's ``preview_tally`` row."""
        async with pooled(self._pool) as conn, conn.transaction(readonly=True):
            await conn.execute(self._q["preview_tally_settings"])
            found = await conn.fetchrow(
                self._q["preview_tally"],
                job_id,
                client_id,
                merges,
                list(names),
                list(names.values()),
                SAMPLE,
                _CHANNEL_IDS,
                _CHANNEL_NAMES,
                part,
            )
        if found is None:  # an aggregate's one row: never
            raise RuntimeError("preview_tally returned no row")
        return found

    async def _sample(
        self,
        conn: Conn,
        job_id: uuid.UUID,
        client_id: int,
        strategy: ConflictStrategy,
        keys_of: list[str],
        names: dict[int, str],
    ) -> list[dict[str, object]]:
        """The sample of a tallied preview: its keys' rows planned by the builder."""
        if not keys_of:
            return []
        records = await conn.fetch(self._q["preview_rows_of_keys"], job_id, keys_of)
        builder = PreviewBuilder(strategy)
        await self._plan_group(conn, builder, client_id, [_row(r) for r in records], names)
        return builder.sample

    async def plan_by_channel(
        self, job: Job, channel: Channel, fields: Sequence[str], policy: MergePolicy
    ) -> PreviewBuilder:
        """:meth:`plan` of a preview keyed by ``channel`` (core.keys): the staged rows grouped
        by the stored contact their key resolves to (or their own key when new); the rows of an
        ambiguous key are invalid ``ambiguous_key``, in the preview's report too."""
        builder = PreviewBuilder(job.strategy, policy)
        refused: list[RowIssue] = []
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction(readonly=True):
                names = await self._field_names(conn, job.client_id, fields)
                query = self._q["preview_rows_by_channel"]
                cursor = await conn.cursor(query, job.id, job.client_id, int(channel))
                pending: list[tuple[ContactRow, int | None]] = []
                while records := await cursor.fetch(_GROUP_ROWS):
                    for record in records:
                        row = _row(record[:6])
                        if record["matches"] > 1:
                            refused.append(keys.ambiguous_issue(row, channel))
                        else:
                            pending.append((row, record["contact_id"]))
                    if len(records) == _GROUP_ROWS and pending:  # the last key may go on
                        last = pending[-1][0].cpf_cnpj
                        done = [p for p in pending if p[0].cpf_cnpj != last]
                        pending = [p for p in pending if p[0].cpf_cnpj == last]
                    else:
                        done, pending = pending, []
                    await self._plan_resolved(conn, builder, job.client_id, done, names)
                await self._plan_resolved(conn, builder, job.client_id, pending, names)
        if refused:
            builder.add_invalid(len(refused))
            await self.add_row_issues(job.id, refused)
        return builder

    async def _plan_resolved(
        self,
        conn: Conn,
        builder: PreviewBuilder,
        client_id: int,
        rows: list[tuple[ContactRow, int | None]],
        names: dict[int, str],
    ) -> None:
        """:meth:`_plan_group` of rows whose keys are resolved to stored contacts (or None)."""
        if not rows:
            return
        by_key: dict[str, list[ContactRow]] = {}
        contact_of: dict[str, int] = {}
        for row, contact_id in rows:
            by_key.setdefault(row.cpf_cnpj, []).append(row)
            if contact_id is not None:
                contact_of[row.cpf_cnpj] = contact_id
        query = self._q["find_contacts_by_id"]
        records = await conn.fetch(query, client_id, sorted(set(contact_of.values())), list(names))
        by_id = {r["id"]: stored_contact(r, names) for r in records}
        for key, key_rows in by_key.items():  # in key order: the rows came sorted
            contact_id = contact_of.get(key)
            builder.add(key_rows, None if contact_id is None else by_id.get(contact_id))

    async def clear_preview(self, job_id: uuid.UUID) -> None:
        with translated_errors():
            await self._pool.execute(self._q["clear_preview_rows"], job_id)

    async def rest_ready(
        self,
        job_id: uuid.UUID,
        document: dict[str, object],
        ttl_s: float,
        *,
        owner: str | None = None,
    ) -> None:
        with translated_errors():
            rested = await self._pool.fetchval(
                self._q["rest_ready"],
                job_id,
                orjson.dumps(document).decode(),
                float(ttl_s),
                lifecycle.allowed_sources(JobStatus.READY),
                owner,
            )
        if rested is None:
            raise IllegalTransitionError(f"import {job_id} cannot rest in ready")

    async def add_row_issues(self, job_id: uuid.UUID, issues: Sequence[RowIssue]) -> None:
        """The issues a run finds outside its batches, under the error report's cap, in one
        transaction."""
        if not issues:
            return
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                stored = await issues_within_cap(conn, job_id, issues, self._row_error_cap)
                records = issue_records(job_id, stored)
                await self._copy_on(conn, "import_row_error", ROW_ERROR_COLUMNS, records)

    async def clear_row_issues(self, job_id: uuid.UUID) -> None:
        with translated_errors():
            await self._pool.execute(self._q["clear_row_errors"], job_id)

    async def save_validation(
        self, job_id: uuid.UUID, validation: dict[str, object], *, owner: str | None = None
    ) -> None:
        with translated_errors():
            saved = await self._pool.fetchval(
                self._q["save_validation"], job_id, orjson.dumps(validation).decode(), owner
            )
        if saved is None:
            raise LeaseLostError(f"import {job_id} is not leased to {owner}")

    async def _copy_in(
        self,
        table: str,
        columns: Sequence[str],
        kinds: Sequence[copybin.Kind],
        records: Sequence[tuple[Any, ...]],
    ) -> None:
        payload = self._encode_rows(kinds, records)
        with translated_errors():
            async with pooled(self._pool) as conn:
                await conn.copy_to_table(
                    table,
                    source=cast("AsyncIterable[bytes]", copy_messages(memoryview(payload))),
                    columns=columns,
                    format="binary",
                )

    async def _copy_on(
        self, conn: Conn, table: str, columns: Sequence[str], records: Sequence[tuple[Any, ...]]
    ) -> None:
        """The error report's rows by binary COPY on ``conn`` (the caller's transaction)."""
        payload = self._encode_rows(copybin.ROW_ERROR, records)
        await conn.copy_to_table(
            table,
            source=cast("AsyncIterable[bytes]", copy_messages(memoryview(payload))),
            columns=columns,
            format="binary",
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
