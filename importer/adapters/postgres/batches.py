"""A run's batches on PostgreSQL: the batch half of the :class:`importer.ports.Store`.

Each batch is applied in one transaction: the rows' writes (decided by ``core.merge`` from the
stored state, then COPYed), its issues, and its ledger row with the counters, last. Around it:
the ledger's reads (done batches, the checkpoint), the lanes of multi-instance imports, the
client's import turn, and the client's custom fields.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from typing import Any, cast

import asyncpg

from importer.adapters.postgres import contacts, copybin, journal
from importer.adapters.postgres.duplicates import write_duplicates
from importer.adapters.postgres.pool import Conn, pooled, translated_errors
from importer.adapters.postgres.records import storable_text
from importer.adapters.postgres.tally import issues_within_cap
from importer.core import duplicates, failpoints, keys, lifecycle, merge, policy
from importer.core.config import DEFAULT_MAX_ROW_ERRORS
from importer.core.errors import (
    BatchAlreadyAppliedError,
    LaneNotReadyError,
    LaneSplitError,
    LeaseLostError,
)
from importer.core.models import (
    Batch,
    Channel,
    Checkpoint,
    ConflictStrategy,
    ContactRow,
    Counters,
    Job,
    Reason,
    RowIssue,
    Severity,
)
from importer.sql import queries

_ID_BLOCK = 4096  # contact ids reserved per sequence round trip
_RUNNING = lifecycle.values(lifecycle.RUNNING_STATUSES)

_CONTACT = ("id", "client_id", "cpf_cnpj", "name", "street_address", "import_job_id")
_DETAIL = ("contact_id", "client_id", "channel_id", "value", "country_code", "country")
_CUSTOM = ("contact_id", "client_id", "custom_field_id", "value")
# The tables a batch plan COPYs into, in the order of copybin.plan_rows / encode_plan.
_PLAN_TABLES = (
    ("contact", _CONTACT, copybin.CONTACT),
    ("contact_details", _DETAIL, copybin.DETAIL),
    ("contact_custom_fields", _CUSTOM, copybin.CUSTOM),
)
ROW_ERROR_COLUMNS = ("job_id", "line", "column_name", "reason", "severity", "value")
_COPY_MESSAGE = 1 << 19  # bytes per CopyData message (asyncpg's own size; the server takes < 1 GB)
_POLICIES_KEPT = 64  # jobs whose parsed merge policy a store keeps (a worker runs a few at once)


def issue_records(job_id: uuid.UUID, issues: Sequence[RowIssue]) -> list[tuple[Any, ...]]:
    """The error report's rows of ``issues`` (:data:`ROW_ERROR_COLUMNS`)."""
    return [
        (job_id, i.line, i.column, i.reason.value, i.severity.value, storable_text(i.value))
        for i in issues
    ]


class PostgresBatches:
    """The batches of runs (the batch half of :class:`importer.ports.Store`).

    Each instance caches the clients' custom field ids and a block of contact ids reserved
    from the sequence, and counts its inserts to ANALYZE as the tables grow. The new rows go
    in by binary COPY encoded by the compiled twin of :mod:`.copybin` (``compiled`` and built);
    otherwise by asyncpg's own record encoding (``copy_records_to_table``), which writes the
    same bytes (tests/integration/test_copybin.py) several times faster than the pure
    :func:`.copybin.encode`, the oracle the compiled encoder is tested against. A plan's rows
    are encoded by the compiled ``encode_plan`` straight from its folds (its oracle:
    :func:`.copybin.encode_plan`).
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        compiled: bool = True,
        max_row_errors: int = DEFAULT_MAX_ROW_ERRORS,
    ) -> None:
        self._pool = pool
        self._max_row_errors = max_row_errors  # the error report's cap per job
        self._encode = copybin.compiled_encoder() if compiled else None
        self._encode_plan = copybin.plan_encoder() if compiled else None
        self._q = queries()
        self._field_ids: dict[tuple[int, str], int] = {}  # (client, lower(name)) → id
        self._policies: dict[uuid.UUID, policy.MergePolicy] = {}  # job → its layout's policy
        self._id_pool: list[int] = []
        self._inserted_since_analyze = 0
        self._analyze_after = lifecycle.FIRST_ANALYZE_AFTER
        self._analyzing = False

    async def ensure_custom_fields(self, job: Job, names: Sequence[str]) -> int:
        with translated_errors():
            created = len(
                await self._pool.fetch(
                    self._q["create_custom_fields"], job.client_id, list(names), job.id
                )
            )
            if created:
                await self._pool.execute(self._q["record_created_fields"], job.id, created)
            rows = await self._pool.fetch(self._q["custom_field_ids"], job.client_id, list(names))
        for row in rows:
            self._field_ids[(job.client_id, row["key"])] = row["id"]
        return created

    async def done_batches(self, job_id: uuid.UUID) -> frozenset[tuple[int, int, int]]:
        with translated_errors():
            rows = await self._pool.fetch(self._q["done_batches"], job_id)
        return frozenset((r["chunk_no"], r["partition"], r["part"]) for r in rows)

    async def checkpoint(self, job_id: uuid.UUID, partitions: int) -> Checkpoint | None:
        with translated_errors():
            row = await self._pool.fetchrow(self._q["checkpoint"], job_id, partitions)
        return None if row is None else Checkpoint(*row)

    # --- batches ------------------------------------------------------------------------------

    async def apply_batch(self, job: Job, batch: Batch, *, lane: bool = False) -> Counters | None:
        """One transaction: the rows' writes, the issues, then the ledger row with the counters.

        The ledger row goes last: if the batch was already applied (a duplicate or a race with
        another worker), its primary key refuses the row and everything rolls back. With
        ``lane`` (multi-instance imports), the batch first enters its lane (:meth:`_in_lane`).
        """
        try:
            with translated_errors():
                async with (
                    pooled(self._pool) as conn,
                    conn.transaction(),
                ):
                    if lane and not await self._in_lane(conn, job, batch):
                        return None
                    if failpoints.armed is not None:
                        await failpoints.armed.reach(failpoints.chunk_point(batch.chunk_no))
                    new_keys, refused = (
                        await self._write_rows(conn, job, batch) if batch.rows else (0, [])
                    )
                    if refused:  # a channel key's ambiguous rows: invalid after all
                        batch = lifecycle.with_refused_rows(batch, refused)
                    await self._write_issues(conn, job.id, batch.issues)
                    if failpoints.armed is not None:
                        await failpoints.armed.reach(failpoints.AFTER_COPY_BEFORE_COMMIT)
                    counters = lifecycle.batch_counters(batch, job.strategy, new_keys)
                    await self._record(conn, job, batch, "done", counters, 1, None)
        except BatchAlreadyAppliedError:
            return None
        await self._keep_statistics(counters.inserted)
        return counters

    async def _in_lane(self, conn: Conn, job: Job, batch: Batch) -> bool:
        """Whether the batch may apply now, in chunk order within its key partition's lane.

        A whole batch moves the lane past its chunk in its own transaction (the lane row stays
        locked until it commits: the next chunk's batch waits for it). A piece of a split batch
        marks the lane as going in by pieces (:meth:`advance_lane` moves it on after the last).
        False: the lane has passed the chunk (a repeat, a no-op). LaneNotReadyError: an earlier
        chunk of the lane is not in yet. LaneSplitError: a whole batch another delivery split.
        """
        key = (job.id, batch.partition, batch.chunk_no)
        entered = self._q["enter_lane"] if batch.part == 1 else self._q["enter_lane_piece"]
        while await conn.fetchval(entered, *key) is None:
            lane = await conn.fetchrow(self._q["lane_position"], job.id, batch.partition)
            if lane is None:
                raise LaneNotReadyError(f"import {job.id} has no lane {batch.partition}", None)
            position = lane["next_chunk"]
            if position > batch.chunk_no:
                return False
            if position < batch.chunk_no:
                raise LaneNotReadyError(
                    f"import {job.id} lane {batch.partition} is at chunk {position}", position
                )
            if batch.part == 1 and lane["split_chunk"] == position:
                parts = await conn.fetch(
                    self._q["batch_parts"], job.id, batch.chunk_no, batch.partition
                )
                raise LaneSplitError(
                    f"import {job.id} chunk {batch.chunk_no} goes in by pieces",
                    frozenset(r["part"] for r in parts),
                )
            # The lane reached the chunk after the update looked at it: try again.
        return True

    async def _keep_statistics(self, inserted: int) -> None:
        """ANALYZE each time this store's inserts double: plans stay right as tables grow."""
        self._inserted_since_analyze += inserted
        if self._analyzing or self._inserted_since_analyze < self._analyze_after:
            return
        self._analyzing = True
        try:
            with translated_errors():
                await self._pool.execute(self._q["analyze_contacts"])
        finally:
            self._analyzing = False
        self._inserted_since_analyze = 0
        self._analyze_after = lifecycle.next_analyze_threshold(self._analyze_after)

    async def discard_batch(
        self,
        job: Job,
        batch: Batch,
        attempts: int,
        error: str,
        *,
        reason: Reason = Reason.CHUNK_DISCARDED,
        lane: bool = False,
    ) -> None:
        lost = tuple(
            RowIssue(r.line, None, reason, error[:1024], Severity.ERROR) for r in batch.rows
        )
        with contextlib.suppress(BatchAlreadyAppliedError), translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                if lane and not await self._in_lane(conn, job, batch):
                    return
                await self._write_issues(conn, job.id, batch.issues + lost)
                counters = lifecycle.discarded_counters(batch)
                await self._record(conn, job, batch, "discarded", counters, attempts, error)

    async def given_up_error(self, job_id: uuid.UUID, batch: Batch) -> str | None:
        if not batch.rows:
            return None
        lines = [r.line for r in batch.rows]
        with translated_errors():
            error: str | None = await self._pool.fetchval(
                self._q["given_up_error"], job_id, batch.chunk_no, batch.partition, lines
            )
        return error

    async def _record(
        self,
        conn: Conn,
        job: Job,
        batch: Batch,
        status: str,
        counters: Counters,
        attempts: int,
        error: str | None,
    ) -> None:
        """The ledger row; a worker's run (``job.lease_owner``) is fenced in the same statement."""
        values = (
            job.id,
            batch.chunk_no,
            batch.partition,
            status,
            batch.first_line,
            batch.end_offset,
            counters.rows_read,
            counters.inserted,
            counters.updated,
            counters.invalid,
            counters.error,
            counters.ignored,
            attempts,
            error,
            batch.part,
            batch.end_line,
        )
        if job.lease_owner is None:
            recorded = await conn.fetchval(self._q["record_batch"], *values) is not None
        else:
            fence = await conn.fetchrow(
                self._q["record_batch_fenced"], *values, job.lease_owner, _RUNNING
            )
            assert fence is not None
            if not fence["held"]:
                raise LeaseLostError(f"import {job.id}: {job.lease_owner} lost its lease")
            recorded = fence["recorded"]
        if not recorded:
            raise BatchAlreadyAppliedError()

    async def _write_rows(self, conn: Conn, job: Job, batch: Batch) -> tuple[int, list[RowIssue]]:
        """Decide the batch's writes from the stored state, then make only those; and the
        duplicate report's rows of the batch, decided from the same state. Returns the new keys
        and the rows refused as ``ambiguous_key`` (a channel key's: core.keys)."""
        rules = self._policy(job)
        channel = keys.key_channel_of(job.layout)
        refused: list[RowIssue] = []
        rows: Sequence[ContactRow] = batch.rows
        if channel is not None:
            names = {i: lower for lower, i in self._client_field_ids(job.client_id).items()}
            rows, folded, stored, refused = await contacts.resolved_batch(
                conn, self._q, job, rows, (channel, rules, names)
            )
        else:
            folded = merge.fold_rows(rows, job.strategy, rules)
            if rules.is_default:
                stored = await self._stored_contacts(conn, job, sorted(folded))
            else:
                stored = await self._stored_with_provenance(conn, job, sorted(folded))
        plan = merge.plan_batch(folded, job.strategy, stored, rules)
        plan.cpf_keys = channel is None
        await self._write_plan(conn, job, plan, batch.key, stored.values())
        if job.duplicates_report:  # the rows the fold took (a channel key's, unified)
            found = duplicates.batch_competitions(rows, folded, stored, job.strategy, rules)
            sources = duplicates.batch_sources(rows, folded, stored, job.strategy, rules, found)
            if found or sources:
                await write_duplicates(conn, job.id, batch, found, sources)
        return plan.new_keys, refused

    async def key_groups(self, job: Job) -> keys.KeyGroups:
        channel = keys.key_channel_of(job.layout)
        if channel is None or job.partitions == 1:
            return keys.NO_GROUPS
        with translated_errors():
            async with pooled(self._pool) as conn, conn.transaction():
                return await contacts.key_groups(conn, self._q, job, channel)

    async def ambiguous_rows(self, job: Job, rows: Sequence[ContactRow]) -> list[RowIssue]:
        channel = keys.key_channel_of(job.layout)
        if channel is None or not rows:
            return []
        with translated_errors():
            async with pooled(self._pool) as conn:
                return await contacts.ambiguous_rows(conn, self._q, job, rows, channel)

    def _policy(self, job: Job) -> policy.MergePolicy:
        """The job's merge policy, parsed once per job (DISCARD ignores it). The run parsed the
        same layout before its first batch, so a bad one never gets here."""
        if job.strategy is not ConflictStrategy.MERGE or job.layout is None:
            return policy.DEFAULT_POLICY
        rules = self._policies.get(job.id)
        if rules is None:
            if len(self._policies) >= _POLICIES_KEPT:
                self._policies.clear()
            rules = self._policies[job.id] = policy.policy_of(job.layout)
        return rules

    def _client_field_ids(self, client: int) -> dict[str, int]:
        """The client's known custom fields: lower-case name → id."""
        return {lower: i for (c, lower), i in self._field_ids.items() if c == client}

    async def _stored_contacts(
        self, conn: Conn, job: Job, keys: list[str]
    ) -> dict[str, merge.StoredContact]:
        names = {i: lower for lower, i in self._client_field_ids(job.client_id).items()}
        query = self._q["find_contacts"]
        return await contacts.stored_contacts(conn, query, job.client_id, keys, names)

    async def _stored_with_provenance(
        self, conn: Conn, job: Job, keys: list[str]
    ) -> dict[str, merge.StoredContact]:
        """:meth:`_stored_contacts` with what this import did to them (a policy's decisions)."""
        names = {i: lower for lower, i in self._client_field_ids(job.client_id).items()}
        query = self._q["find_contacts_with_provenance"]
        rows = await conn.fetch(query, job.client_id, keys, list(names), job.id)
        return {r["cpf_cnpj"]: contacts.stored_with_provenance(r, names) for r in rows}

    async def _write_plan(
        self,
        conn: Conn,
        job: Job,
        plan: merge.BatchPlan,
        batch: journal.BatchKey,
        stored: Iterable[merge.StoredContact],
    ) -> None:
        """Journal what the batch changes of the ``stored`` contacts it planned against (the
        undo's before-images); COPY the new contacts, channels and custom values; then update
        what MERGE changes in stored contacts."""
        client = job.client_id
        ids = await self._contact_ids(conn, len(plan.new_contacts))
        field_ids = self._client_field_ids(client)
        custom_updates = sorted(  # one lock order for every writer
            (cid, field_ids[name.lower()], value) for cid, name, value in plan.custom_updates
        )
        if job.journaled:
            await journal.write_journal(conn, self._q, job, batch, plan, ids, stored, field_ids)
        # Let the event loop serve others (HTTP requests in `importer serve`) before the batch's
        # rows are encoded: several milliseconds of work.
        await asyncio.sleep(0)
        if self._encode_plan is not None:
            payloads = self._encode_plan(plan, ids, client, job.id, field_ids)
            for (table, columns, _), payload in zip(_PLAN_TABLES, payloads, strict=True):
                if len(payload) > copybin.EMPTY:
                    await self._copy_payload(conn, table, columns, payload)
        else:
            all_rows = copybin.plan_rows(plan, ids, client, job.id, field_ids)
            for (table, columns, kinds), rows in zip(_PLAN_TABLES, all_rows, strict=True):
                if rows:
                    await self._copy(conn, table, columns, kinds, rows)
        await self._update_stored(conn, plan, custom_updates)
        if plan.marks or plan.detail_revivals:
            await self._write_provenance(conn, job, plan)
        if job.journey_id is not None:
            await self._join_journey(conn, job, plan, ids)

    async def _join_journey(
        self, conn: Conn, job: Job, plan: merge.BatchPlan, new_ids: Sequence[int]
    ) -> None:
        """Seed 003 §9: every contact whose rows carry a journey channel joins the import's
        journey classification, one ``journey_contact`` per (contact, journey detail). Idempotent
        (a requeued run's batch links nothing twice)."""
        links = list(plan.stored_journeys)
        for contact_id, contact in zip(new_ids, plan.new_contacts, strict=True):
            links += [
                (contact_id, v) for ch, v in merge.channel_values(contact) if ch is Channel.JOURNEY
            ]
        if links:
            contact_ids, values = zip(*sorted(links), strict=True)
            await conn.execute(
                self._q["join_journey"], job.id, job.client_id, list(contact_ids), list(values)
            )

    async def _update_stored(
        self, conn: Conn, plan: merge.BatchPlan, custom_updates: Sequence[tuple[int, int, str]]
    ) -> None:
        """MERGE's changes of stored contacts; ``custom_updates``: (contact, field id, value),
        sorted (one lock order for every writer)."""
        if plan.contact_updates:
            ids, names, addresses = zip(*plan.contact_updates, strict=True)
            await conn.execute(self._q["update_contacts"], ids, names, addresses)
        if custom_updates:
            await conn.execute(
                self._q["update_custom_values"], *map(list, zip(*custom_updates, strict=True))
            )

    async def _write_provenance(self, conn: Conn, job: Job, plan: merge.BatchPlan) -> None:
        """A policy's marks, then replace's deletions (which join their channel's mark) and
        revivals, in one lock order (contact, channel, value)."""
        if plan.marks:
            contact_ids, targets = zip(*sorted(plan.marks), strict=True)
            await conn.execute(
                self._q["insert_merge_marks"], job.id, list(contact_ids), list(targets)
            )
        if plan.detail_deletions:
            await conn.execute(self._q["replace_details"], job.id, *_columns(plan.detail_deletions))
        if plan.detail_revivals:
            await conn.execute(self._q["revive_details"], job.id, *_columns(plan.detail_revivals))

    async def _contact_ids(self, conn: Conn, count: int) -> list[int]:
        """Ids for new contacts, reserved from the sequence in blocks (gaps are harmless)."""
        while len(self._id_pool) < count:
            block = max(count - len(self._id_pool), _ID_BLOCK)
            self._id_pool.extend(r[0] for r in await conn.fetch(self._q["next_contact_ids"], block))
        ids = self._id_pool[:count]
        del self._id_pool[:count]
        return ids

    async def _write_issues(
        self, conn: Conn, job_id: uuid.UUID, issues: Sequence[RowIssue]
    ) -> None:
        if not issues:
            return
        stored = await issues_within_cap(conn, job_id, issues, self._max_row_errors)
        records = issue_records(job_id, stored)
        await self._copy(conn, "import_row_error", ROW_ERROR_COLUMNS, copybin.ROW_ERROR, records)

    async def _copy(
        self,
        conn: Conn,
        table: str,
        columns: Sequence[str],
        kinds: Sequence[copybin.Kind],
        rows: Sequence[tuple[Any, ...]],
    ) -> None:
        """COPY ``rows`` into ``table``: one binary payload, sent in messages of half a megabyte
        (without the compiled encoder: asyncpg encodes the records)."""
        if self._encode is None:
            await conn.copy_records_to_table(table, records=rows, columns=columns)
            return
        await self._copy_payload(conn, table, columns, self._encode(kinds, rows))

    @staticmethod
    async def _copy_payload(
        conn: Conn, table: str, columns: Sequence[str], payload: bytearray
    ) -> None:
        """COPY a binary payload into ``table``, in messages of half a megabyte."""
        messages = cast("AsyncIterable[bytes]", copy_messages(memoryview(payload)))  # any buffer
        await conn.copy_to_table(table, source=messages, columns=columns, format="binary")


async def copy_messages(payload: memoryview) -> AsyncIterator[memoryview]:
    """The payload in CopyData-sized slices (a memoryview each, never bytes: asyncpg would
    take bytes for a file's path)."""
    for start in range(0, len(payload), _COPY_MESSAGE):
        yield payload[start : start + _COPY_MESSAGE]


def _columns(changes: Sequence[tuple[int, int, str]]) -> list[list[object]]:
    """(contact, channel, value) changes as three parameter arrays, in one lock order."""
    return [list(column) for column in zip(*sorted(changes), strict=True)]
