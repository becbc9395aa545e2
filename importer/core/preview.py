"""What an import would do, decided before it does anything: the preview document.

The import plans each batch against the stored state as the batch finds it. A preview plans
each key once, against its stored state, with all of the key's valid rows of the file folded
in file order. The decision is the same: the final state of a key never depends on how its rows
are cut into batches (SPEC "Conflict strategies": the state and the counters are identical for
any chunk size and concurrency), so a preview's counters are the counters the import ends with
when nothing writes in between.

:class:`PreviewBuilder` is fed the keys in ascending order, each with its rows and its stored
contact, and keeps bounded state whatever the file's size: the counters, a tally per target
field, and a sample of at most :data:`SAMPLE` contacts with their values before and after.
With a layout's merge policy, a stored contact's values after are those of the import's own
plan for the key (``merge.plan_batch``: the policy speaks of the state before the import, which
is the state a preview reads).

Under the default policy and the CPF/CNPJ key the PostgreSQL store sums the same counters and
tallies set-based over all the keys at once (``preview_tally`` in ``sql/queries/previews.sql``)
and hands them to :func:`tallied`; this builder then plans only the sample's keys, and stays
the specification (the tests compare the two documents).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from importer.core import merge
from importer.core.models import Channel, ConflictStrategy, ContactRow, Counters
from importer.core.policy import DEFAULT_POLICY, MergePolicy

SAMPLE = 20  # contacts shown with their values before → after
DOCUMENT_VERSION = 1


@dataclass(slots=True)
class FieldTally:
    """How many contacts a target field would give a first value, change, or leave as they are
    (of the contacts the file names that have a value of the field, before or after)."""

    first: int = 0
    changed: int = 0
    kept: int = 0

    def add(self, before: object, after: object) -> None:
        if after is None or after == before:
            if before is not None:
                self.kept += 1
        elif before is None:
            self.first += 1
        else:
            self.changed += 1

    def as_dict(self) -> dict[str, int]:
        return {"first": self.first, "changed": self.changed, "kept": self.kept}


# A channel's target field name, by channel id (an int from the database or a Channel).
_CHANNEL_FIELDS: dict[int, str] = {int(c): f"channel:{c.name.lower()}" for c in Channel}


def _values(channel: Channel, pairs: Iterable[tuple[int, str]]) -> list[str]:
    """The values of one channel among (channel, value) pairs, sorted."""
    return sorted(v for c, v in pairs if c == channel)


def _by_channel(pairs: Iterable[tuple[int, str]]) -> dict[str, set[str]]:
    """(channel, value) pairs grouped by their channel's target field name, in one pass."""
    grouped: dict[str, set[str]] = {}
    for channel, value in pairs:
        name = _CHANNEL_FIELDS[channel]
        values = grouped.get(name)
        if values is None:
            grouped[name] = {value}
        else:
            values.add(value)
    return grouped


@dataclass(slots=True)
class PreviewBuilder:
    """The preview of one import, fed key by key in ascending key order (:meth:`add`)."""

    strategy: ConflictStrategy
    policy: MergePolicy = DEFAULT_POLICY
    counters: Counters = field(default_factory=Counters)
    fields: dict[str, FieldTally] = field(default_factory=dict)
    sample: list[dict[str, object]] = field(default_factory=list)
    _last_key: str | None = field(default=None, init=False, repr=False)

    def add(self, rows: Sequence[ContactRow], stored: merge.StoredContact | None) -> None:
        """One key: its valid rows in file order and its stored contact (None: a new key)."""
        key = rows[0].cpf_cnpj
        if self._last_key is not None and key <= self._last_key:
            raise ValueError(f"keys out of order: {key!r} after {self._last_key!r}")
        self._last_key = key
        rest = len(rows) - (stored is None)
        self.counters.rows_read += len(rows)
        self.counters.inserted += stored is None
        if self.strategy is ConflictStrategy.MERGE:
            self.counters.updated += rest
        else:
            self.counters.ignored += rest
        folded = merge.merged(merge.fold_rows(rows, self.strategy, self.policy)[key])
        before = _before(stored) if stored is not None else {}
        if stored is not None and self.strategy is ConflictStrategy.DISCARD:
            after = before  # DISCARD leaves a stored contact as it is
        elif stored is not None and not self.policy.is_default:
            after = _planned(folded, stored, self.policy)
        else:
            after = _after(folded, stored, before)
        changes: dict[str, dict[str, object]] = {}
        tallies = self.fields
        for name in before.keys() | after.keys():
            was, will = before.get(name), after.get(name)
            tally = tallies.get(name)
            if tally is None:
                tally = tallies[name] = FieldTally()
            tally.add(was, will)
            if will is not None and will != was:
                changes[name] = {"before": was, "after": will}
        if changes and len(self.sample) < SAMPLE:
            self.sample.append(
                {
                    "key": key,
                    "line": rows[0].line,
                    "action": "insert" if stored is None else "update",
                    "fields": dict(sorted(changes.items())),
                }
            )

    def add_invalid(self, count: int) -> None:
        """Rows the file has that are invalid (they are in the error report)."""
        self.counters.rows_read += count
        self.counters.invalid += count

    def document(self, new_custom_fields: Sequence[str]) -> dict[str, object]:
        """The preview document (stored on the job, printed by ``--dry-run``)."""
        return {
            "version": DOCUMENT_VERSION,
            "counters": asdict(self.counters),
            "fields": {name: self.fields[name].as_dict() for name in sorted(self.fields)},
            "new_custom_fields": sorted(new_custom_fields, key=str.lower),
            "sample": self.sample,
        }


def _before(stored: merge.StoredContact) -> dict[str, object]:
    """A stored contact's values by target field name (``name``, ``street_address``,
    ``custom:<lower-case name>``, ``channel:<channel>``: its sorted values)."""
    values: dict[str, object] = {}
    if stored.name is not None:
        values["name"] = stored.name
    if stored.street_address is not None:
        values["street_address"] = stored.street_address
    for lower, value in stored.custom_fields.items():
        values[f"custom:{lower}"] = value
    for name, found in _by_channel(stored.details).items():
        values[name] = sorted(found)
    return values


def _after(
    folded: merge.MergedContact, stored: merge.StoredContact | None, before: dict[str, object]
) -> dict[str, object]:
    """The values a key ends with: MERGE's (the file's last non-empty value over the stored one,
    ``before``: :func:`_before` of it, the union of channels)."""
    values = dict(before)
    if folded.name is not None:
        values["name"] = folded.name
    if folded.street_address is not None:
        values["street_address"] = folded.street_address
    for lower, (_, value) in folded.custom_fields.items():
        values[f"custom:{lower}"] = value
    pairs = folded.details.keys() if stored is None else {*stored.details, *folded.details}
    for name, union in _by_channel(pairs).items():
        values[name] = sorted(union)
    return values


def tallied(
    strategy: ConflictStrategy,
    rows: int,
    new_keys: int,
    fields: Mapping[str, FieldTally],
    sample: Sequence[dict[str, object]],
) -> PreviewBuilder:
    """A builder holding a preview summed elsewhere, over all the keys at once (the database's
    set-based tally), as :meth:`PreviewBuilder.add` sums it key by key: ``rows`` valid rows of
    which ``new_keys`` keys are new (each of their other rows updates under MERGE, is ignored
    under DISCARD), the field tallies, and the sample the builder planned."""
    builder = PreviewBuilder(strategy, fields=dict(fields), sample=list(sample))
    rest = rows - new_keys
    counters = builder.counters
    counters.rows_read, counters.inserted = rows, new_keys
    if strategy is ConflictStrategy.MERGE:
        counters.updated = rest
    else:
        counters.ignored = rest
    return builder


def counters_differ(
    document: Mapping[str, object] | None, counters: Counters, *, applied: bool, ended: bool
) -> bool | None:
    """Whether the import of an applied preview ended with other counters than the preview
    showed: something wrote to the client's contacts between the two (or the run failed).
    None until an applied preview's import has ended."""
    if document is None or not applied or not ended:
        return None
    return document.get("counters") != asdict(counters)


def _planned(
    folded: merge.MergedContact, stored: merge.StoredContact, policy: MergePolicy
) -> dict[str, object]:
    """The values a stored contact ends with under a policy: its import plan, applied."""
    plan = merge.plan_batch(
        {folded.key: folded}, ConflictStrategy.MERGE, {folded.key: stored}, policy
    )
    values = _before(stored)
    for _, name, address in plan.contact_updates:
        if name is not None:
            values["name"] = name
        if address is not None:
            values["street_address"] = address
    for _, field_name, value in (*plan.custom_inserts, *plan.custom_updates):
        values[f"custom:{field_name.lower()}"] = value
    pairs = set(stored.details) - {(c, v) for _, c, v in plan.detail_deletions}
    pairs |= {(d.channel, d.value) for _, d in plan.detail_inserts}
    pairs |= {(c, v) for _, c, v in plan.detail_revivals}
    for channel in Channel:
        found = _values(channel, pairs)
        key = f"channel:{channel.name.lower()}"
        if found:
            values[key] = found
        else:
            values.pop(key, None)
    return values
