"""The reference model of the import semantics, and an in-memory Store built on it.

:class:`ReferenceModel` applies valid rows one at a time in file order, straight from SPEC
"Conflict strategies" and the layout's merge policy (``core.policy``); it is deliberately naive
so it can be read as the specification. Tests compare the PostgreSQL result with it; the
benchmark uses it to compute the final rows.

Why this module is long: the model and :class:`InMemoryStore` are one specification, the
semantics and the Store contract (``importer.ports.Store``) at their most literal, read side by
side; every store method is a few lines over the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field, replace

from importer.core import duplicates, keys, lifecycle, merge, threshold
from importer.core import policy as rules
from importer.core.duplicates import Competition
from importer.core.errors import (
    IllegalTransitionError,
    JobNotFoundError,
    LaneNotReadyError,
    LaneSplitError,
)
from importer.core.merge import StoredContact
from importer.core.models import (
    Batch,
    Channel,
    Checkpoint,
    ConflictStrategy,
    ContactRow,
    Counters,
    Finalized,
    InputFormat,
    Job,
    JobStatus,
    JobWarning,
    NewJob,
    Reason,
    RowIssue,
    Severity,
)
from importer.core.policy import DEFAULT_POLICY, ChannelRule, MergePolicy, Rule
from importer.core.preview import PreviewBuilder


@dataclass(slots=True)
class ContactState:
    """One contact as the reference model holds it."""

    name: str | None
    street_address: str | None
    details: set[tuple[Channel, str]] = field(default_factory=set)
    custom_fields: dict[str, str] = field(default_factory=dict)  # lower(field name) → value


@dataclass(slots=True)
class ImportTrace:
    """What one import did so far: the contacts it created and the fields it gave a value to
    (``core.policy`` targets). The policy's rules are about the state before the import."""

    created: set[tuple[int, str]] = field(default_factory=set)
    written: set[tuple[int, str, str]] = field(default_factory=set)  # (client, key, target)


CREATED_PREFIX = "#"  # a channel key's new contact: no CPF/CNPJ, an identity of the model's


@dataclass(slots=True)
class ReferenceModel:
    """Contacts by (client_id, identity): the CPF/CNPJ, or for a contact a channel-keyed import
    created, ``#<n>``. ``apply`` is the semantics of one import, row by row."""

    contacts: dict[tuple[int, str], ContactState] = field(default_factory=dict)
    traces: dict[object, ImportTrace] = field(default_factory=dict)  # by import
    created: int = 0  # contacts channel-keyed imports created

    def apply(
        self,
        client_id: int,
        rows: Iterable[ContactRow],
        strategy: ConflictStrategy,
        policy: MergePolicy = DEFAULT_POLICY,
        import_id: object = None,
        key_channel: Channel | None = None,
        refused: list[ContactRow] | None = None,
    ) -> Counters:
        """Apply valid rows in file order; return inserted/updated/ignored (rows_read = rows).
        Calls with the same ``import_id`` are one import (None: a new one each call).

        With ``key_channel`` (core.keys) a row's key is a value of that channel: it names the
        one live contact that has it, or a new one; a row whose value two contacts have is
        ``invalid`` (and appended to ``refused``)."""
        fresh = ImportTrace()
        trace = fresh if import_id is None else self.traces.setdefault(import_id, fresh)
        traced = not policy.is_default  # the default's rules need no trace (nor its memory)
        counters = Counters()
        for row in rows:
            counters.rows_read += 1
            if key_channel is None:
                key = (client_id, row.cpf_cnpj)
            else:
                found = self.holders(client_id, key_channel, row.cpf_cnpj)
                if len(found) > 1:
                    counters.invalid += 1
                    if refused is not None:
                        refused.append(row)
                    continue
                if found:
                    key = found[0]
                else:
                    self.created += 1
                    key = (client_id, f"{CREATED_PREFIX}{self.created}")
            existing = self.contacts.get(key)
            if existing is None:
                self.contacts[key] = existing = ContactState(None, None)
                if traced:
                    trace.created.add(key)
                _apply_row(existing, row, policy, trace, key)
                counters.inserted += 1
            elif strategy is ConflictStrategy.MERGE:
                _apply_row(existing, row, policy, trace, key)
                counters.updated += 1
            else:
                counters.ignored += 1
        return counters

    def resolve(
        self, client_id: int, channel: Channel, rows: Sequence[ContactRow]
    ) -> tuple[list[ContactRow], dict[str, tuple[int, str]], list[ContactRow]]:
        """A channel key's rows as a batch (or a preview) takes them against the contacts as
        they are now (core.keys): the kept rows, the keys of one contact unified under the
        smallest; each such (canonical) key's contact; the refused (ambiguous) rows."""
        holders = {key: self.holders(client_id, channel, key) for key in {r.cpf_cnpj for r in rows}}
        found = {key: held[0] for key, held in holders.items() if len(held) == 1}
        numbered = {contact: n for n, contact in enumerate(sorted(set(found.values())))}
        kept = keys.unify(
            [r for r in rows if len(holders[r.cpf_cnpj]) <= 1],
            {key: numbered[contact] for key, contact in found.items()},
        )
        identity = {r.cpf_cnpj: found[r.cpf_cnpj] for r in kept if r.cpf_cnpj in found}
        return kept, identity, [r for r in rows if len(holders[r.cpf_cnpj]) > 1]

    def holders(self, client_id: int, channel: Channel, value: str) -> list[tuple[int, str]]:
        """The client's contacts that have ``value`` in ``channel`` (naive: the specification)."""
        return [
            key
            for key, state in self.contacts.items()
            if key[0] == client_id and (channel, value) in state.details
        ]

    def client_state(self, client_id: int) -> dict[str, ContactState]:
        return {key: state for (client, key), state in self.contacts.items() if client == client_id}


def _apply_row(
    state: ContactState,
    row: ContactRow,
    policy: MergePolicy,
    trace: ImportTrace,
    key: tuple[int, str],
) -> None:
    """MERGE one row by the policy (the default: a non-empty value wins, an empty one never
    erases; channels are a union). A row's value of a custom field is its last column of it."""
    if _lands(policy.name, row.name, state.name, trace, key, rules.NAME):
        state.name = row.name
    address, stored_address = row.street_address, state.street_address
    if _lands(policy.street_address, address, stored_address, trace, key, rules.STREET_ADDRESS):
        state.street_address = address
    for lower, value in {name.lower(): value for name, value in row.custom_fields}.items():
        rule, target = policy.custom_rule(lower), rules.custom_target(lower)
        if _lands(rule, value, state.custom_fields.get(lower), trace, key, target):
            state.custom_fields[lower] = value
    for channel in sorted({d.channel for d in row.details}):
        values = {d.value for d in row.details if d.channel == channel}
        mark = (*key, rules.channel_target(channel))
        replacing = policy.channels is ChannelRule.REPLACE and key not in trace.created
        if replacing and mark not in trace.written:  # the import's first values of it
            state.details -= {(c, v) for c, v in state.details if c == channel}
            trace.written.add(mark)
        state.details.update((channel, value) for value in values)


def _lands(
    rule: Rule,
    value: str | None,
    current: str | None,
    trace: ImportTrace,
    key: tuple[int, str],
    target: str,
) -> bool:
    """Whether a row's value of a field lands (an empty value never does); the rule speaks of
    the value the field had before the import."""
    if value is None:
        return False
    given = (*key, target) in trace.written  # this import gave the field its value already
    if rule is Rule.FIRST_NON_EMPTY:
        lands = not given
    elif rule is Rule.FILL_EMPTY:
        lands = given or current is None or key in trace.created
    elif rule is Rule.KEEP_EXISTING:
        lands = key in trace.created
    else:
        lands = True
    if lands and rule is not Rule.LAST_NON_EMPTY:
        trace.written.add((*key, target))
    return lands


class InMemoryStore:
    """A :class:`importer.ports.Store` kept in memory, applying batches with the reference model.

    Used to test the pipeline without a database: whatever order batches arrive in per
    partition, the result must equal the reference model applied to the whole file.
    """

    def __init__(self, yields: Sequence[int] = ()) -> None:
        self.model = ReferenceModel()
        # Scheduling, drawn by property tests: how often a batch of partition p lets the other
        # consumers run before it applies (yields[p % len]), so partitions overtake each other.
        self.yields = tuple(yields)
        self.jobs: dict[uuid.UUID, Job] = {}
        self.ledger: dict[uuid.UUID, dict[tuple[int, int, int], Counters]] = {}
        # Whole batches' reader positions: (chunk_no, partition) → (end_offset, end_line).
        self.positions: dict[uuid.UUID, dict[tuple[int, int], tuple[int, int]]] = {}
        self.lanes: dict[tuple[uuid.UUID, int], int] = {}  # (job, partition) → next chunk
        self.lane_splits: dict[tuple[uuid.UUID, int], int] = {}  # → chunk going in by pieces
        self.turns: dict[int, asyncio.Lock] = {}  # client → its import turn
        self.issues: dict[uuid.UUID, list[RowIssue]] = {}
        self.custom_fields: dict[tuple[int, str], str] = {}
        self.created_fields: dict[uuid.UUID, int] = {}
        self.finalized: dict[uuid.UUID, Finalized] = {}
        self.read_to_end: set[uuid.UUID] = set()  # jobs whose reader reached the file's end
        self.staged: dict[uuid.UUID, list[ContactRow]] = {}  # a preview's valid rows
        self.groups: dict[uuid.UUID, keys.KeyGroups] = {}  # a channel key's (kept per job)
        # The duplicate report's competitions: ((chunk_no, batch's first line), competition).
        self.competitions: dict[uuid.UUID, list[tuple[tuple[int, int], Competition]]] = {}
        # Its sources (duplicates.batch_sources), in the same order.
        self.sources: dict[uuid.UUID, list[tuple[tuple[int, int], duplicates.SourceRow]]] = {}

    async def create_job(self, new_job: NewJob, status: JobStatus) -> Job:
        job = Job(
            new_job.id,
            new_job.client_id,
            status,
            ConflictStrategy(new_job.strategy),
            new_job.source,
            InputFormat(new_job.input_format),
            new_job.chunk_size,
            new_job.partitions,
            new_job.user_id,
            preview_requested=new_job.preview,
            max_invalid=new_job.max_invalid,
            layout=new_job.layout,
            duplicates_report=new_job.duplicates_report,
        )
        self.jobs[job.id] = job
        self.ledger[job.id], self.issues[job.id] = {}, []
        return job

    async def get_job(self, job_id: uuid.UUID) -> Job:
        if job_id not in self.jobs:
            raise JobNotFoundError()
        return self.jobs[job_id]

    async def transition(
        self,
        job_id: uuid.UUID,
        target: JobStatus,
        *,
        owner: str | None = None,  # noqa: ARG002 (one process: no leases to fence)
    ) -> None:
        job = await self.get_job(job_id)
        if not lifecycle.can_transition(job.status, target):
            raise IllegalTransitionError(f"{job.status.value} → {target.value}")
        self.jobs[job_id] = replace(job, status=target)

    async def mark_read_to_end(
        self,
        job_id: uuid.UUID,
        *,
        owner: str | None = None,  # noqa: ARG002 (one process: no leases to fence)
    ) -> None:
        self.read_to_end.add(job_id)

    async def ensure_custom_fields(self, job: Job, names: Sequence[str]) -> int:
        created = 0
        for name in names:
            if (job.client_id, name.lower()) not in self.custom_fields:
                self.custom_fields[(job.client_id, name.lower())] = name
                created += 1
        self.created_fields[job.id] = self.created_fields.get(job.id, 0) + created
        return created

    async def done_batches(self, job_id: uuid.UUID) -> frozenset[tuple[int, int, int]]:
        return frozenset(self.ledger[job_id])

    async def checkpoint(self, job_id: uuid.UUID, partitions: int) -> Checkpoint | None:
        return lifecycle.checkpoint(self.positions.get(job_id, {}), partitions)

    def _in_lane(self, job: Job, batch: Batch) -> bool:
        """PostgresBatches._in_lane, in memory."""
        key = (job.id, batch.partition)
        position = self.lanes.get(key)
        if position is None:
            raise LaneNotReadyError(f"import {job.id} has no lane {batch.partition}", None)
        if position == batch.chunk_no:
            if batch.part != 1:
                self.lane_splits[key] = position
                return True
            if self.lane_splits.get(key) != position:
                self.lanes[key] = position + 1
                return True
            parts = {part for (c, p, part) in self.ledger[job.id] if (c, p) == batch.key[:2]}
            raise LaneSplitError(f"chunk {batch.chunk_no} goes in by pieces", frozenset(parts))
        if position > batch.chunk_no:
            return False
        raise LaneNotReadyError(f"lane {batch.partition} is at chunk {position}", position)

    @contextlib.asynccontextmanager
    async def client_turn(self, client_id: int, stop: asyncio.Event) -> AsyncIterator[bool]:
        """PostgresBatches.client_turn, in memory (one event loop)."""
        lock = self.turns.setdefault(client_id, asyncio.Lock())
        waiter = asyncio.ensure_future(lock.acquire())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({waiter, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not waiter.done() or waiter.cancelled():
            waiter.cancel()
            yield False
            return
        try:
            yield True
        finally:
            lock.release()

    async def open_lanes(self, job_id: uuid.UUID, partitions: int) -> None:
        for partition in range(partitions):
            if (job_id, partition) not in self.lanes:
                done = {c for (c, p, part) in self.ledger[job_id] if p == partition and part == 1}
                chunk_no = 0
                while chunk_no in done:
                    chunk_no += 1
                self.lanes[(job_id, partition)] = chunk_no

    async def advance_lane(self, job: Job, batch: Batch) -> bool:
        key = (job.id, batch.partition)
        if self.lanes.get(key) != batch.chunk_no:
            return False
        self.lanes[key] = batch.chunk_no + 1
        return True

    async def lanes_behind(self, job_id: uuid.UUID) -> int | None:
        positions = [n for (j, _), n in self.lanes.items() if j == job_id]
        return min(positions) if positions else None

    def _position(self, job_id: uuid.UUID, batch: Batch) -> None:
        if batch.part == 1:
            positions = self.positions.setdefault(job_id, {})
            positions[(batch.chunk_no, batch.partition)] = (batch.end_offset, batch.end_line)

    async def apply_batch(self, job: Job, batch: Batch, *, lane: bool = False) -> Counters | None:
        for _ in range(self.yields[batch.partition % len(self.yields)] if self.yields else 0):
            await asyncio.sleep(0)
        if batch.key in self.ledger[job.id]:
            return None
        if lane and not self._in_lane(job, batch):
            return None
        policy = rules.policy_of(job.layout)
        if job.strategy is not ConflictStrategy.MERGE:
            policy = DEFAULT_POLICY  # DISCARD ignores the policy
        channel = keys.key_channel_of(job.layout)
        if job.duplicates_report and batch.rows:
            self._compete(job, batch, policy, channel)
        refused: list[ContactRow] = []
        applied = self.model.apply(
            job.client_id, batch.rows, job.strategy, policy, job.id, channel, refused
        )
        if refused:
            assert channel is not None
            batch = lifecycle.with_refused_rows(
                batch, [keys.ambiguous_issue(r, channel) for r in refused]
            )
        counters = Counters(
            rows_read=batch.rows_read,
            inserted=applied.inserted,
            updated=applied.updated,
            ignored=applied.ignored,
            invalid=batch.invalid,
        )
        self.ledger[job.id][batch.key] = counters
        self._position(job.id, batch)
        self.issues[job.id].extend(batch.issues)
        return counters

    def _compete(
        self, job: Job, batch: Batch, policy: MergePolicy, channel: Channel | None
    ) -> None:
        """The batch's competitions, against the model's contacts as the batch finds them (a
        channel key's rows as PostgresBatches folds them: the ambiguous ones out, the keys of
        one contact unified)."""
        rows: Sequence[ContactRow] = batch.rows
        identity: dict[str, tuple[int, str]] = {}
        if channel is not None:
            rows, identity, _ = self.model.resolve(job.client_id, channel, rows)
        folded = merge.fold_rows(rows, job.strategy, policy)
        trace = self.model.traces.get(job.id, ImportTrace())
        stored = {}
        for key in folded:
            at = identity.get(key, (job.client_id, key))
            state = self.model.contacts.get(at) if channel is None or key in identity else None
            if state is not None:
                stored[key] = _stored_with_trace(state, trace, at)
        found = duplicates.batch_competitions(rows, folded, stored, job.strategy, policy)
        sources = duplicates.batch_sources(rows, folded, stored, job.strategy, policy, found)
        order = (batch.chunk_no, batch.rows[0].line)
        self.competitions.setdefault(job.id, []).extend((order, Competition(*c)) for c in found)
        self.sources.setdefault(job.id, []).extend((order, s) for s in sources)

    async def discard_batch(
        self,
        job: Job,
        batch: Batch,
        attempts: int,  # noqa: ARG002 (the port's signature)
        error: str,
        *,
        reason: Reason = Reason.CHUNK_DISCARDED,
        lane: bool = False,
    ) -> None:
        if batch.key in self.ledger[job.id]:
            return
        if lane and not self._in_lane(job, batch):
            return
        self.ledger[job.id][batch.key] = lifecycle.discarded_counters(batch)
        self._position(job.id, batch)
        lost = (RowIssue(r.line, None, reason, error[:1024], Severity.ERROR) for r in batch.rows)
        self.issues[job.id].extend((*batch.issues, *lost))

    async def given_up_error(self, job_id: uuid.UUID, batch: Batch) -> str | None:
        lines = {r.line for r in batch.rows}
        for issue in self.issues[job_id]:
            if issue.reason is Reason.CHUNK_DISCARDED and issue.line in lines:
                return issue.value or ""
        return None

    async def finalize(
        self,
        job_id: uuid.UUID,
        fail_reason: str | None,
        *,
        cancelled: bool = False,
        owner: str | None = None,  # noqa: ARG002 (one process: no leases to fence)
    ) -> Finalized | None:
        job = await self.get_job(job_id)
        target = lifecycle.final_status(fail_reason, cancelled)
        if job_id in self.finalized or not lifecycle.can_transition(job.status, target):
            return None
        if target is JobStatus.COMPLETED and self.created_fields.get(job_id):
            target = JobStatus.COMPLETED_WITH_PLACEHOLDERS
        totals = lifecycle.sum_counters(self.ledger[job_id].values())
        totals.add(threshold.exceeded_counters(job.validation))
        self.jobs[job_id] = replace(
            job, status=target, fail_reason=fail_reason, counters=totals, awaiting_apply=False
        )
        self.finalized[job_id] = Finalized(target, totals)
        return self.finalized[job_id]

    async def add_warning(self, job_id: uuid.UUID, warning: JobWarning) -> None:
        job = await self.get_job(job_id)
        if all(w.code is not warning.code for w in job.warnings):
            self.jobs[job_id] = replace(job, warnings=(*job.warnings, warning))

    async def row_issues(self, job_id: uuid.UUID) -> AsyncIterator[RowIssue]:
        for warning in self.jobs[job_id].warnings:
            yield warning.as_issue()
        for issue in sorted(self.issues[job_id], key=lambda i: i.line):
            yield issue

    async def duplicates(self, job_id: uuid.UUID) -> AsyncIterator[Competition]:
        competitions = self.competitions.get(job_id, [])
        competing: dict[str, set[str]] = {}
        for _, c in competitions:
            competing.setdefault(c.key, set()).add(c.field)
        entries = [  # a batch's sources before its competitions, as the database orders them
            (order, c)
            for order, source in self.sources.get(job_id, ())
            for c in duplicates.source_competitions([source], competing)
        ]
        entries += competitions
        found = sorted(entries, key=lambda oc: (oc[1].key, oc[1].field, oc[0]))
        for competition in duplicates.combined(c for _, c in found):
            yield competition

    # --- outside the batches -------------------------------------------------------------------

    async def stage_preview(
        self,
        job_id: uuid.UUID,
        rows: Sequence[ContactRow],
        partition: int = 0,  # noqa: ARG002 (planned key by key: no partitions to tally)
    ) -> None:
        self.staged.setdefault(job_id, []).extend(rows)

    async def plan_preview(
        self, job: Job, fields: Sequence[str]
    ) -> tuple[PreviewBuilder, list[str]]:
        wanted = {name.lower() for name in fields}
        staged = self.staged.get(job.id, [])
        builder = PreviewBuilder(job.strategy, rules.policy_of(job.layout))
        channel = keys.key_channel_of(job.layout)
        identity: dict[str, tuple[int, str]] = {}  # key → its stored contact's
        if channel is not None:
            staged = self._resolved_staged(job, channel, staged, builder, identity)
        rows = sorted(staged, key=lambda r: (r.cpf_cnpj.encode(), r.line))
        for key, key_rows in itertools.groupby(rows, key=lambda r: r.cpf_cnpj):
            state = self.model.contacts.get(identity.get(key, (job.client_id, key)))
            builder.add(list(key_rows), None if state is None else _stored(state, wanted))
        new = [n for n in fields if (job.client_id, n.lower()) not in self.custom_fields]
        return builder, new

    async def clear_preview(self, job_id: uuid.UUID) -> None:
        self.staged.pop(job_id, None)

    def _resolved_staged(
        self,
        job: Job,
        channel: Channel,
        staged: list[ContactRow],
        builder: PreviewBuilder,
        identity: dict[str, tuple[int, str]],
    ) -> list[ContactRow]:
        """A channel-keyed preview's rows (PostgresPreviews.plan_by_channel, in memory): the
        ambiguous ones refused, the keys of one stored contact under the smallest of them;
        ``identity`` learns each canonical key's contact."""
        unified, found, refused = self.model.resolve(job.client_id, channel, staged)
        if refused:
            builder.add_invalid(len(refused))
            self.issues[job.id].extend(keys.ambiguous_issue(r, channel) for r in refused)
        identity.update(found)
        return unified

    async def rest_ready(
        self,
        job_id: uuid.UUID,
        document: dict[str, object],
        ttl_s: float,  # noqa: ARG002 (nothing expires in a test's store)
        *,
        owner: str | None = None,  # noqa: ARG002
    ) -> None:
        job = await self.get_job(job_id)
        if not lifecycle.can_transition(job.status, JobStatus.READY):
            raise IllegalTransitionError(f"import {job_id}: {job.status.value} → ready")
        self.jobs[job_id] = replace(
            job, status=JobStatus.READY, preview=document, awaiting_apply=True
        )

    async def add_row_issues(self, job_id: uuid.UUID, issues: Sequence[RowIssue]) -> None:
        self.issues[job_id].extend(issues)

    async def clear_row_issues(self, job_id: uuid.UUID) -> None:
        self.issues[job_id] = []

    async def key_groups(self, job: Job) -> keys.KeyGroups:
        """PostgresBatches.key_groups, in memory: the kept ones, else read and kept."""
        channel = keys.key_channel_of(job.layout)
        if channel is None or job.partitions == 1:
            return keys.NO_GROUPS
        if job.id in self.groups:
            return self.groups[job.id]
        pairs = [
            (n, value)
            for n, ((client, _), state) in enumerate(self.model.contacts.items())
            if client == job.client_id
            for values in [sorted(v for c, v in state.details if c is channel)]
            if len(values) > 1
            for value in values
        ]
        self.groups[job.id] = groups = keys.key_groups(pairs)
        return groups

    async def ambiguous_rows(self, job: Job, rows: Sequence[ContactRow]) -> list[RowIssue]:
        channel = keys.key_channel_of(job.layout)
        if channel is None:
            return []
        return [
            keys.ambiguous_issue(r, channel)
            for r in rows
            if len(self.model.holders(job.client_id, channel, r.cpf_cnpj)) > 1
        ]

    async def save_validation(
        self,
        job_id: uuid.UUID,
        validation: dict[str, object],
        *,
        owner: str | None = None,  # noqa: ARG002
    ) -> None:
        self.jobs[job_id] = replace(await self.get_job(job_id), validation=validation)

    def apply_preview(self, job_id: uuid.UUID) -> Job:
        """A resting preview handed to its next run (the API's apply)."""
        job = replace(self.jobs[job_id], awaiting_apply=False, preview_applied=True)
        self.jobs[job_id] = job
        return job


def _stored(state: ContactState, fields: set[str]) -> StoredContact:
    """A contact of the model as the database's reader gives it (the import's custom fields)."""
    return StoredContact(
        0,
        state.name,
        state.street_address,
        frozenset((int(c), v) for c, v in state.details),
        {k: v for k, v in state.custom_fields.items() if k in fields},
    )


def _stored_with_trace(
    state: ContactState, trace: ImportTrace, key: tuple[int, str]
) -> StoredContact:
    """A contact of the model with what the import did to it (a policy's provenance)."""
    marks = frozenset(target for *k, target in trace.written if tuple(k) == key)
    return StoredContact(
        0,
        state.name,
        state.street_address,
        frozenset((int(c), v) for c, v in state.details),
        dict(state.custom_fields),
        key in trace.created,
        marks,
    )
