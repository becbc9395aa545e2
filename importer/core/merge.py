"""The merge decision of one batch: a pure function from (rows, stored state) to writes.

A batch holds the rows of one key partition of one chunk, in file order. Given the stored state
of the keys it touches (read in the same transaction), :func:`plan_batch` decides exactly which
rows to insert and which values to change, so the database only does the work that changes
something: new contacts, new channels and new custom values are COPY'd (plain inserts, no
conflict arbitration); stored contacts get only their changed name/address and custom values.

Most keys come once in a batch: such a key's row stands for its fold (a :data:`Folded` is the
row itself or, once a second row of the key came, a :class:`MergedContact`), so the common
case allocates nothing; :func:`merged` gives either as a ``MergedContact``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from importer.core.models import Channel, ConflictStrategy, ContactRow, Detail


@dataclass(frozen=True, slots=True)
class StoredContact:
    """A live contact as it is in the database: its live channels and the custom values of the
    fields the import knows (by lower-case name)."""

    id: int
    name: str | None
    street_address: str | None
    details: frozenset[tuple[int, str]] = frozenset()  # (channel, value)
    custom_fields: Mapping[str, str] = field(default_factory=dict)


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

    @property
    def new_keys(self) -> int:
        return len(self.new_contacts)


def fold_rows(rows: Sequence[ContactRow], strategy: ConflictStrategy) -> dict[str, Folded]:
    """Fold each key's rows in file order: MERGE keeps the last non-empty values and the union of
    channels; DISCARD keeps the key's first row only. A key's single row stands for itself."""
    folded: dict[str, Folded] = {}
    merge_repeats = strategy is ConflictStrategy.MERGE
    for row in rows:
        entry = folded.get(row.cpf_cnpj)
        if entry is None:
            folded[row.cpf_cnpj] = row
        elif merge_repeats:
            if isinstance(entry, ContactRow):
                entry = folded[row.cpf_cnpj] = _first(entry)
            _fold(entry, row)
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


def _fold(merged: MergedContact, row: ContactRow) -> None:
    if row.name is not None:
        merged.name = row.name
    if row.street_address is not None:
        merged.street_address = row.street_address
    for detail in row.details:
        merged.details.setdefault((detail.channel, detail.value), detail)
    for name, value in row.custom_fields:
        merged.custom_fields[name.lower()] = (name, value)


def plan_batch(
    folded: Mapping[str, Folded],
    strategy: ConflictStrategy,
    stored: Mapping[str, StoredContact],
) -> BatchPlan:
    """Decide the writes: new keys become new contacts; MERGE into stored ones (DISCARD leaves
    them alone)."""
    plan = BatchPlan()
    for key in sorted(folded):
        entry = folded[key]
        contact = stored.get(key)
        if contact is None:
            plan.new_contacts.append(entry)
        elif strategy is ConflictStrategy.MERGE:
            _plan_merge(plan, contact, merged(entry))
    return plan


def _plan_merge(plan: BatchPlan, contact: StoredContact, merged: MergedContact) -> None:
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
