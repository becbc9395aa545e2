"""The merge decision of one batch: a pure function from (rows, stored state) to writes.

A batch holds the rows of one key partition of one chunk, in file order. Given the stored state
of the keys it touches (read in the same transaction), :func:`plan_batch` decides exactly which
rows to insert and which values to change, so the database only does the work that changes
something: new contacts, new channels and new custom values are COPY'd (plain inserts, no
conflict arbitration); stored contacts get only their changed name/address and custom values.

Most keys come once in a batch: such a key's row stands for its fold (a :data:`Folded` is the
row itself or, once a second row of the key came, a :class:`MergedContact`), so the common
case allocates nothing; :func:`merged` gives either as a ``MergedContact``.

A layout's merge policy (``core.policy``) changes which value each field keeps: the fold keeps
the first non-empty value of a ``first_non_empty`` field, and the plan decides against the
stored contact with :func:`importer.core.policy.decide`, marking what the import set so its
later batches know. The default policy takes the paths it always took.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from importer.core import policy as rules
from importer.core.models import Channel, ConflictStrategy, ContactRow, Detail
from importer.core.policy import DEFAULT_POLICY, MergePolicy, Rule


@dataclass(frozen=True, slots=True)
class StoredContact:
    """A live contact as it is in the database: its live channels and the custom values of the
    fields the import knows (by lower-case name)."""

    id: int
    name: str | None
    street_address: str | None
    details: frozenset[tuple[int, str]] = frozenset()  # (channel, value)
    custom_fields: Mapping[str, str] = field(default_factory=dict)
    # Provenance, read only for a non-default policy: whether this import created the contact,
    # the fields an earlier batch of it gave a value (core.policy marks), and the details its
    # ``replace`` soft-deleted (which come back, the same rows, when a later batch has them).
    own: bool = False
    marks: frozenset[str] = frozenset()
    revivable: frozenset[tuple[int, str]] = frozenset()  # (channel, value)
    # For the undo journal, not for any decision: the row's last change (restored with its
    # values) and the import that created it (none of its values are journaled by that one).
    updated_at: dt.datetime | None = None
    import_job_id: uuid.UUID | None = None


@dataclass(slots=True)
class MergedContact:
    """What the file's rows say about one key, folded in file order."""

    key: str
    name: str | None = None
    street_address: str | None = None
    details: dict[tuple[Channel, str], Detail] = field(default_factory=dict)
    custom_fields: dict[str, tuple[str, str]] = field(default_factory=dict)  # lower → (name, value)


Folded = ContactRow | MergedContact  # a key's rows folded: its only row, or the merge of several


@dataclass(slots=True)
class BatchPlan:
    """The writes of a batch. ``new_keys`` counts the keys that did not exist."""

    new_contacts: list[Folded] = field(default_factory=list)  # in key order
    # (id, name, street_address); a None value leaves the stored one (an empty never erases)
    contact_updates: list[tuple[int, str | None, str | None]] = field(default_factory=list)
    # Stored contacts' channels they do not have yet, and custom values: (contact id, ...)
    detail_inserts: list[tuple[int, Detail]] = field(default_factory=list)
    custom_inserts: list[tuple[int, str, str]] = field(default_factory=list)  # (id, name, value)
    custom_updates: list[tuple[int, str, str]] = field(default_factory=list)  # changed values
    # Stored contacts' journey channels in the file, stored or new: (contact id, value). With new
    # contacts' journey details they join the import's journey (seed 003 §9).
    stored_journeys: list[tuple[int, str]] = field(default_factory=list)
    # A non-default policy's writes: the marks (contact id, core.policy target), and ``replace``'s
    # stored details soft-deleted or brought back: (contact id, channel, value).
    marks: list[tuple[int, str]] = field(default_factory=list)
    detail_deletions: list[tuple[int, int, str]] = field(default_factory=list)
    detail_revivals: list[tuple[int, int, str]] = field(default_factory=list)
    # Whether the keys are CPF/CNPJs, the new contacts' ``cpf_cnpj`` (a channel key's are
    # written without one: core.keys).
    cpf_keys: bool = True

    @property
    def new_keys(self) -> int:
        return len(self.new_contacts)


def fold_rows(
    rows: Sequence[ContactRow], strategy: ConflictStrategy, policy: MergePolicy = DEFAULT_POLICY
) -> dict[str, Folded]:
    """Fold each key's rows in file order: MERGE keeps the last non-empty values (the first of a
    ``first_non_empty`` field) and the union of channels; DISCARD keeps the key's first row
    only. A key's single row stands for itself."""
    folded: dict[str, Folded] = {}
    merge_repeats = strategy is ConflictStrategy.MERGE
    fold = _fold_first if merge_repeats and policy.takes_first else _fold
    for row in rows:
        entry = folded.get(row.cpf_cnpj)
        if entry is None:
            folded[row.cpf_cnpj] = row
        elif merge_repeats:
            if isinstance(entry, ContactRow):
                entry = folded[row.cpf_cnpj] = _first(entry)
            fold(entry, row, policy)
    return folded


def merged(entry: Folded) -> MergedContact:
    """A fold as a :class:`MergedContact` (a single row folded into nothing)."""
    return entry if isinstance(entry, MergedContact) else _first(entry)


def channel_values(entry: Folded) -> Iterator[tuple[Channel, str]]:
    """The (channel, value) pairs of a fold, each once, in the order they came."""
    return iter(merged(entry).details)


def _first(row: ContactRow) -> MergedContact:
    """A key's first row, folded into nothing. (Two details of one row with the same channel and
    value are equal: either one may stand for both.)"""
    return MergedContact(
        row.cpf_cnpj,
        row.name,
        row.street_address,
        {(d.channel, d.value): d for d in row.details},
        {name.lower(): (name, value) for name, value in row.custom_fields},
    )


def _fold(merged: MergedContact, row: ContactRow, _: MergePolicy = DEFAULT_POLICY) -> None:
    if row.name is not None:
        merged.name = row.name
    if row.street_address is not None:
        merged.street_address = row.street_address
    for detail in row.details:
        merged.details.setdefault((detail.channel, detail.value), detail)
    for name, value in row.custom_fields:
        merged.custom_fields[name.lower()] = (name, value)


def _fold_first(merged: MergedContact, row: ContactRow, policy: MergePolicy) -> None:
    """:func:`_fold` where some fields keep their first non-empty value. A row's value of a
    custom field is its last column of that name, as :func:`_first` has it."""
    first = Rule.FIRST_NON_EMPTY
    if row.name is not None and (merged.name is None or policy.name is not first):
        merged.name = row.name
    if row.street_address is not None and (
        merged.street_address is None or policy.street_address is not first
    ):
        merged.street_address = row.street_address
    for detail in row.details:
        merged.details.setdefault((detail.channel, detail.value), detail)
    customs = merged.custom_fields
    for lower, pair in {name.lower(): (name, value) for name, value in row.custom_fields}.items():
        if lower not in customs or policy.custom_rule(lower) is not first:
            customs[lower] = pair


def plan_batch(
    folded: Mapping[str, Folded],
    strategy: ConflictStrategy,
    stored: Mapping[str, StoredContact],
    policy: MergePolicy = DEFAULT_POLICY,
) -> BatchPlan:
    """Decide the writes: new keys become new contacts; MERGE into stored ones by the policy
    (DISCARD leaves them alone). The stored contacts carry their provenance when the policy is
    not the default."""
    plan = BatchPlan()
    plan_merge = _plan_merge if policy.is_default else _plan_policy_merge
    for key in sorted(folded):
        entry = folded[key]
        contact = stored.get(key)
        if contact is None:
            plan.new_contacts.append(entry)
        elif strategy is ConflictStrategy.MERGE:
            plan_merge(plan, contact, merged(entry), policy)
    return plan


def _plan_merge(
    plan: BatchPlan, contact: StoredContact, merged: MergedContact, _: MergePolicy
) -> None:
    """MERGE into a stored contact: a non-empty value wins, an empty one never erases; a channel
    it lacks is added; a custom value is inserted, or updated when it differs."""
    name_changes = merged.name is not None and merged.name != contact.name
    address_changes = (
        merged.street_address is not None and merged.street_address != contact.street_address
    )
    if name_changes or address_changes:  # None in an update means "leave the stored value"
        plan.contact_updates.append((contact.id, merged.name, merged.street_address))
    stored_details = contact.details
    plan.detail_inserts.extend(
        (contact.id, detail)
        for channel_value, detail in merged.details.items()
        if channel_value not in stored_details
    )
    plan.stored_journeys.extend(
        (contact.id, value) for channel, value in merged.details if channel is Channel.JOURNEY
    )
    stored_values = contact.custom_fields
    for lower, (field_name, value) in merged.custom_fields.items():
        stored = stored_values.get(lower)
        if stored is None:
            plan.custom_inserts.append((contact.id, field_name, value))
        elif stored != value:
            plan.custom_updates.append((contact.id, field_name, value))


def _plan_policy_merge(
    plan: BatchPlan, contact: StoredContact, merged: MergedContact, policy: MergePolicy
) -> None:
    """MERGE into a stored contact by a policy: each field's value lands where
    :func:`importer.core.policy.decide` says (marking it when a later batch must know)."""
    name = _landing(plan, contact, rules.NAME, policy.name, merged.name, contact.name)
    address = _landing(
        plan,
        contact,
        rules.STREET_ADDRESS,
        policy.street_address,
        merged.street_address,
        contact.street_address,
    )
    if name is not None or address is not None:
        plan.contact_updates.append((contact.id, name, address))
    stored_values = contact.custom_fields
    for lower, (field_name, value) in merged.custom_fields.items():
        stored = stored_values.get(lower)
        target, rule = rules.custom_target(lower), policy.custom_rule(lower)
        if _landing(plan, contact, target, rule, value, stored) is None:
            continue
        if stored is None:
            plan.custom_inserts.append((contact.id, field_name, value))
        else:
            plan.custom_updates.append((contact.id, field_name, value))
    if policy.channels is rules.ChannelRule.REPLACE and not contact.own:
        _plan_replace(plan, contact, merged)
    else:
        plan.detail_inserts.extend(
            (contact.id, detail)
            for channel_value, detail in merged.details.items()
            if channel_value not in contact.details
        )
    plan.stored_journeys.extend(
        (contact.id, value) for channel, value in merged.details if channel is Channel.JOURNEY
    )


def _landing(
    plan: BatchPlan,
    contact: StoredContact,
    target: str,
    rule: Rule,
    value: str | None,
    stored: str | None,
) -> str | None:
    """The value the field changes to (None: it keeps its own), marking it if it must be."""
    if value is None:  # an empty value never erases, nor marks
        return None
    lands, mark = rules.decide(rule, stored is None, contact.own, target in contact.marks)
    if mark:
        plan.marks.append((contact.id, target))
    return value if lands and value != stored else None


def _plan_replace(plan: BatchPlan, contact: StoredContact, merged: MergedContact) -> None:
    """``replace`` into a contact the import did not create, channel by channel of the file: the
    first batch with values of a channel soft-deletes the stored values it lacks and marks the
    channel; a later batch only adds, bringing back a value the first one deleted."""
    by_channel: dict[int, list[tuple[tuple[Channel, str], Detail]]] = {}
    for channel_value, detail in merged.details.items():
        by_channel.setdefault(channel_value[0], []).append((channel_value, detail))
    for channel, items in sorted(by_channel.items()):
        target = rules.channel_target(channel)
        if target in contact.marks:
            for channel_value, detail in items:
                if channel_value in contact.details:
                    continue
                if channel_value in contact.revivable:
                    plan.detail_revivals.append((contact.id, channel, channel_value[1]))
                else:
                    plan.detail_inserts.append((contact.id, detail))
            continue
        plan.marks.append((contact.id, target))
        values = {channel_value[1] for channel_value, _ in items}
        plan.detail_deletions.extend(
            (contact.id, channel, value)
            for stored_channel, value in sorted(contact.details)
            if stored_channel == channel and value not in values
        )
        plan.detail_inserts.extend(
            (contact.id, detail)
            for channel_value, detail in items
            if channel_value not in contact.details
        )
