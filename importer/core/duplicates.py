"""The duplicate-resolution report: where more than one source competed for a field of a key.

A *competition* is one (key, field) of one batch where a non-empty value lost: several rows of
the key brought different values, or a row met the stored contact's. It names the winning
value and where it came from (a line, or ``None``: the stored contact), the losing lines,
whether the stored value lost, and the rule that decided (the policy's rule, or ``discard``).
The winner is exactly the value the batch's plan leaves on the contact (``core.merge``): it is
decided here by the same rules (``core.policy.decide``) from the same stored state.

Fields: ``name``, ``street_address``, ``custom:<Name>``, and ``channel:<name>`` only where a
``replace`` policy drops stored values (a union keeps every value: nothing competes). DISCARD
reports per field: a key's first row (or its stored contact) wins every field a later row also
had with another value.

Cost: only keys with more than one row in the batch, or with a stored contact, are looked at;
a key seen once and new costs a dictionary lookup. Across batches, :func:`combine` makes one row
of a (key, field)'s competitions in batch order.

A batch's *sources* (:func:`batch_sources`, issue 25) say which line gave each field a value the
batch wrote without a competition (a new key's row, a row that filled an empty stored field):
``(key, line, fields)``, one small tuple per key. The report reads them only for the (key, field)s
that compete, so that a later chunk's competition names the import's own earlier line where the
value it met came from, instead of ``stored``.

Why this module is long: it is one decision — what the batch's plan left on each (key, field) and
where that came from — taken twice over the same helpers (the fields a row gives, a rule's landing
line, the stored value): once for what competed, once for what a line wrote unopposed, plus their
combination across batches. Split, the halves would share those private helpers both ways.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

from importer.core import policy as rules
from importer.core.merge import Folded, MergedContact, StoredContact
from importer.core.models import Channel, ConflictStrategy, ContactRow
from importer.core.policy import ChannelRule, MergePolicy, Rule

DISCARD_RULE = "discard"  # the rule word of a DISCARD import's competitions
REPLACE_RULE = ChannelRule.REPLACE.value
NAME = rules.NAME
STREET_ADDRESS = rules.STREET_ADDRESS
STORED = "stored"  # the report's word for the stored contact as a source


class Competition(NamedTuple):
    """One (key, field) where a non-empty value lost, in one batch (or combined: a report row).
    A tuple: a batch's go to COPY as ``(job, chunk, line, *competition)`` without a copy each."""

    key: str
    field: str
    winner_value: str | None
    winner_line: int | None  # None: the stored contact's value won
    losing_lines: tuple[int, ...]
    loser_stored: bool  # the stored contact's value lost
    rule: str


# A competition as a batch finds it: a Competition's fields in a plain tuple (built several
# times faster than the named one; orjson writes it as it is). Competition(*row) names them.
CompetitionRow = tuple[str, str, str | None, int | None, tuple[int, ...], bool, str]

# A batch's source: (key, line, the report fields that line gave the key's value in the batch).
SourceRow = tuple[str, int, tuple[str, ...]]
# A new key's single row: the contact is its, every field it has (a field it lacks stays
# empty until a later line's source or competition, which comes after it).
EVERY_FIELD: tuple[str, ...] = ()
SOURCE_RULE = "source"  # the rule word of a source read back among competitions (never reported)


def batch_competitions(
    rows: Sequence[ContactRow],
    folded: Mapping[str, Folded],
    stored: Mapping[str, StoredContact],
    strategy: ConflictStrategy,
    policy: MergePolicy,
) -> list[CompetitionRow]:
    """The competitions of one batch, by key then field: ``rows`` in file order, ``folded``
    their fold (``merge.fold_rows``), ``stored`` the stored contacts as the batch read them."""
    discard = strategy is ConflictStrategy.DISCARD
    repeated = _repeated(rows, folded) if discard else _merged_keys(folded)
    keys = repeated.union(stored.keys() & folded.keys()) if stored else repeated
    if not keys:
        return []
    by_key: dict[str, list[ContactRow]] = {}
    if repeated:
        for row in rows:
            if row.cpf_cnpj in repeated:
                by_key.setdefault(row.cpf_cnpj, []).append(row)
    found: list[CompetitionRow] = []
    replace = not discard and policy.channels is ChannelRule.REPLACE
    default = not discard and policy.is_default
    for key in sorted(keys):
        contact = stored.get(key)
        if key not in repeated:
            entry = folded[key]
            assert isinstance(entry, ContactRow)  # a key's single row stands for its fold
            assert contact is not None  # else it would cost nothing, and not be here
            if default:
                _over_stored(found, key, entry, contact)
            else:
                _against_stored(found, key, entry, contact, None if discard else policy)
            if replace and not contact.own:
                found.extend(_replaced(key, (entry,), contact))
        elif discard:
            found.extend(_discarded(key, by_key[key], contact))
        else:
            found.extend(_merged(key, by_key[key], contact, policy))
    return found


def batch_sources(
    rows: Sequence[ContactRow],
    folded: Mapping[str, Folded],
    stored: Mapping[str, StoredContact],
    strategy: ConflictStrategy,
    policy: MergePolicy,
    found: Sequence[CompetitionRow],
) -> list[SourceRow]:
    """The lines that gave the batch's keys the values it wrote without a competition (those in
    ``found`` name their lines): a new key's fields, and MERGE's fields a row changed on a stored
    contact (a DISCARD leaves stored contacts as they are). Channels are not sources: only a
    ``replace`` of a contact the import did not create competes on them."""
    discard = strategy is ConflictStrategy.DISCARD
    default = policy.is_default
    competing = {(c[0], c[1]) for c in found}
    repeated = _merged_keys(folded) if not discard else set()
    by_key: dict[str, list[ContactRow]] = {}
    if repeated:
        for row in rows:
            if row.cpf_cnpj in repeated:
                by_key.setdefault(row.cpf_cnpj, []).append(row)
    sources: list[SourceRow] = []
    for key, entry in folded.items():
        contact = stored.get(key)
        if key in repeated:
            sources.extend(_merged_sources(key, by_key[key], contact, policy, competing))
            continue
        assert isinstance(entry, ContactRow)  # a key's single row (DISCARD: its first)
        if contact is None:  # the hot path: a new key's row wrote every field it has
            sources.append((key, entry.line, EVERY_FIELD))
            continue
        if discard:
            continue  # a DISCARD leaves a stored contact as it is
        if default:
            fields = _filled(entry, contact)
        else:
            fields = tuple(_row_sources(key, entry, contact, policy, competing))
        if fields:
            sources.append((key, entry.line, fields))
    return sources


def _filled(row: ContactRow, contact: StoredContact) -> tuple[str, ...]:
    """The default policy's sources of a stored contact's single row: the fields it filled (a
    different stored value competes, an equal one is no change)."""
    fields = []
    if row.name is not None and contact.name is None:
        fields.append(NAME)
    if row.street_address is not None and contact.street_address is None:
        fields.append(STREET_ADDRESS)
    if row.custom_fields:
        stored = contact.custom_fields
        for lower, name in {n.lower(): n for n, _ in row.custom_fields}.items():
            if lower not in stored:
                fields.append(f"custom:{name}")
    return tuple(fields)


def _row_sources(
    key: str,
    row: ContactRow,
    contact: StoredContact | None,
    policy: MergePolicy,
    competing: set[tuple[str, str]],
) -> Iterator[str]:
    """MERGE: the fields a key's single row changed on its stored contact."""
    values: list[tuple[str, str, str | None, Rule]] = []
    if row.name is not None:
        values.append((NAME, NAME, row.name, policy.name))
    if row.street_address is not None:
        values.append((STREET_ADDRESS, STREET_ADDRESS, row.street_address, policy.street_address))
    for lower, (name, value) in {n.lower(): (n, v) for n, v in row.custom_fields}.items():
        values.append((f"custom:{name}", lower, value, policy.custom_rule(lower)))
    for field, target, written, rule in values:
        if (key, field) not in competing and _lands(contact, target, written, rule):
            yield field


def _merged_sources(
    key: str,
    rows: Sequence[ContactRow],
    contact: StoredContact | None,
    policy: MergePolicy,
    competing: set[tuple[str, str]],
) -> Iterator[SourceRow]:
    """MERGE, a key's rows: each field's landing line (first or last non-empty, by its rule),
    one source per line."""
    by_line: dict[int, list[str]] = {}
    for field, target, values in _sources(rows):
        rule = _field_rule(policy, target)
        line, value = values[0] if rule is Rule.FIRST_NON_EMPTY else values[-1]
        if (key, field) not in competing and _lands(contact, target, value, rule):
            by_line.setdefault(line, []).append(field)
    for line, fields in sorted(by_line.items()):
        yield (key, line, tuple(fields))


def _field_rule(policy: MergePolicy, target: str) -> Rule:
    if target == NAME:
        return policy.name
    if target == STREET_ADDRESS:
        return policy.street_address
    return policy.custom_rule(target)


def _lands(contact: StoredContact | None, target: str, value: str | None, rule: Rule) -> bool:
    """Whether a row's ``value`` becomes the field's value (MERGE; a stored contact's equal value
    is no change)."""
    if contact is None:
        return True
    stored = _stored_value(contact, target)
    if stored == value:
        return False
    if rule is Rule.LAST_NON_EMPTY:
        return True
    mark = target if target in (NAME, STREET_ADDRESS) else rules.custom_target(target)
    lands, _ = rules.decide(rule, stored is None, contact.own, mark in contact.marks)
    return lands


def _over_stored(
    found: list[CompetitionRow], key: str, row: ContactRow, contact: StoredContact
) -> None:
    """:func:`_against_stored` under the default policy, the hot path of a MERGE into stored
    contacts: the row's value wins wherever it differs from a non-empty stored one."""
    line, last = row.line, Rule.LAST_NON_EMPTY
    name, stored = row.name, contact.name
    if name is not None and stored is not None and name != stored:
        found.append((key, NAME, name, line, (), True, last))
    address, stored = row.street_address, contact.street_address
    if address is not None and stored is not None and address != stored:
        found.append((key, STREET_ADDRESS, address, line, (), True, last))
    if not row.custom_fields:
        return
    stored_values = contact.custom_fields
    for lower, (field_name, value) in {n.lower(): (n, v) for n, v in row.custom_fields}.items():
        stored = stored_values.get(lower)
        if stored is not None and value != stored:
            found.append((key, f"custom:{field_name}", value, line, (), True, last))


def _against_stored(
    found: list[CompetitionRow],
    key: str,
    row: ContactRow,
    contact: StoredContact,
    policy: MergePolicy | None,
) -> None:
    """A key's single row against its stored contact (the common case, kept short): a field
    competes where the row's value differs from the stored one. ``policy`` None: DISCARD."""
    line = row.line
    name, address = row.name, row.street_address
    if name is not None and name != contact.name:
        rule = None if policy is None else policy.name
        _one(found, key, NAME, NAME, name, contact.name, line, contact, rule)
    if address is not None and address != contact.street_address:
        rule = None if policy is None else policy.street_address
        stored = contact.street_address
        _one(found, key, STREET_ADDRESS, STREET_ADDRESS, address, stored, line, contact, rule)
    if not row.custom_fields:
        return
    stored_values = contact.custom_fields
    for lower, (field_name, value) in {n.lower(): (n, v) for n, v in row.custom_fields}.items():
        stored = stored_values.get(lower)
        if value != stored:
            rule = None if policy is None else policy.custom_rule(lower)
            field, mark = f"custom:{field_name}", rules.custom_target(lower)
            _one(found, key, field, mark, value, stored, line, contact, rule)


def _one(
    found: list[CompetitionRow],
    key: str,
    field: str,
    mark: str,
    value: str,
    stored: str | None,
    line: int,
    contact: StoredContact,
    rule: Rule | None,
) -> None:
    """One row's value against a different stored one, by ``rule`` (None: DISCARD); nothing
    when it lands where nothing was stored (it competed with no value)."""
    if rule is None:
        found.append((key, field, stored, None, (line,), False, DISCARD_RULE))
        return
    if rule is Rule.LAST_NON_EMPTY:
        lands = True
    else:
        lands, _ = rules.decide(rule, stored is None, contact.own, mark in contact.marks)
    if not lands:
        found.append((key, field, stored, None, (line,), False, rule))
    elif stored is not None:
        found.append((key, field, value, line, (), True, rule))


def _merged_keys(folded: Mapping[str, Folded]) -> set[str]:
    """MERGE: the keys with more than one row (their fold is a MergedContact)."""
    return {key for key, entry in folded.items() if isinstance(entry, MergedContact)}


def _repeated(rows: Sequence[ContactRow], folded: Mapping[str, Folded]) -> set[str]:
    """DISCARD: the keys with more than one row (the fold kept only their first)."""
    if len(rows) == len(folded):
        return set()
    seen: set[str] = set()
    repeated: set[str] = set()
    for row in rows:
        (repeated if row.cpf_cnpj in seen else seen).add(row.cpf_cnpj)
    return repeated


def _sources(rows: Sequence[ContactRow]) -> Iterator[tuple[str, str, list[tuple[int, str]]]]:
    """Each field the rows give a value: (field, lower-case target, [(line, value)]) in order.
    A row's value of a custom field is its last column of that name."""
    names = [(row.line, row.name) for row in rows if row.name is not None]
    if names:
        yield NAME, NAME, names
    addresses = [(row.line, row.street_address) for row in rows if row.street_address is not None]
    if addresses:
        yield STREET_ADDRESS, STREET_ADDRESS, addresses
    for lower, (name, values) in _customs(rows).items():
        yield f"custom:{name}", lower, values


def _stored_value(contact: StoredContact, target: str) -> str | None:
    if target == NAME:
        return contact.name
    if target == STREET_ADDRESS:
        return contact.street_address
    return contact.custom_fields.get(target)


def _merged(
    key: str, rows: Sequence[ContactRow], contact: StoredContact | None, policy: MergePolicy
) -> list[CompetitionRow]:
    """MERGE, a key's rows: each field's file value (first or last non-empty) against the stored
    one by the rule (:func:`_field`)."""
    found: list[CompetitionRow] = []
    names = [(row.line, row.name) for row in rows if row.name is not None]
    if names:
        stored = None if contact is None else contact.name
        _field(found, key, NAME, NAME, names, contact, stored, policy.name)
    addresses = [(row.line, row.street_address) for row in rows if row.street_address is not None]
    if addresses:
        stored = None if contact is None else contact.street_address
        rule = policy.street_address
        _field(found, key, STREET_ADDRESS, STREET_ADDRESS, addresses, contact, stored, rule)
    for lower, (name, values) in _customs(rows).items():
        stored = None if contact is None else contact.custom_fields.get(lower)
        rule = policy.custom_rule(lower)
        _field(found, key, f"custom:{name}", lower, values, contact, stored, rule)
    if contact is not None and policy.channels is ChannelRule.REPLACE and not contact.own:
        found.extend(_replaced(key, rows, contact))
    return found


def _customs(rows: Sequence[ContactRow]) -> dict[str, tuple[str, list[tuple[int, str]]]]:
    """The rows' custom values by lower-case field name: (a name as written, [(line, value)]).
    A row's value of a custom field is its last column of that name."""
    customs: dict[str, tuple[str, list[tuple[int, str]]]] = {}
    for row in rows:
        if row.custom_fields:
            for lower, (name, value) in {n.lower(): (n, v) for n, v in row.custom_fields}.items():
                customs.setdefault(lower, (name, []))[1].append((row.line, value))
    return customs


def _field(
    found: list[CompetitionRow],
    key: str,
    field: str,
    target: str,
    values: list[tuple[int, str]],
    contact: StoredContact | None,
    stored: str | None,
    rule: Rule,
) -> None:
    """One field of a key's rows (``values``: its non-empty (line, value) pairs in file order):
    the value the plan leaves, and what lost to it. ``target``: ``name``, ``street_address`` or
    a custom field's lower-case name."""
    if contact is None and len(values) == 1:
        return
    line: int | None
    value: str | None
    line, value = values[0] if rule is Rule.FIRST_NON_EMPTY else values[-1]
    if contact is not None and rule is not Rule.LAST_NON_EMPTY:
        mark = target if target in (NAME, STREET_ADDRESS) else rules.custom_target(target)
        lands, _ = rules.decide(rule, stored is None, contact.own, mark in contact.marks)
        if not lands:
            line, value = None, stored
    losing = tuple([n for n, v in values if v != value])
    loser_stored = stored is not None and stored != value
    if losing or loser_stored:
        found.append((key, field, value, line, losing, loser_stored, rule))


def _competition(
    key: str,
    field: str,
    winner: str | None,
    winner_line: int | None,
    values: Sequence[tuple[int, str]],
    contact: StoredContact | None,
    target: str,
    rule: str,
) -> CompetitionRow | None:
    """The competition of a field whose value is ``winner``, if a non-empty value lost."""
    losing = tuple(line for line, value in values if value != winner)
    stored = None if contact is None else _stored_value(contact, target)
    loser_stored = stored is not None and stored != winner
    if not losing and not loser_stored:
        return None
    return (key, field, winner, winner_line, losing, loser_stored, rule)


def _discarded(
    key: str, rows: Sequence[ContactRow], contact: StoredContact | None
) -> Iterator[CompetitionRow]:
    """DISCARD: the stored contact, else the key's first row, wins every field."""
    first = rows[0]
    for field, target, values in _sources(rows):
        if contact is None:
            winner, line = _row_value(first, target), first.line
            later = [(n, v) for n, v in values if n != first.line]
        else:
            winner, line, later = _stored_value(contact, target), None, list(values)
        competition = _competition(key, field, winner, line, later, contact, target, DISCARD_RULE)
        if competition is not None:
            yield competition


def _row_value(row: ContactRow, target: str) -> str | None:
    if target == NAME:
        return row.name
    if target == STREET_ADDRESS:
        return row.street_address
    value = None
    for name, custom in row.custom_fields:
        if name.lower() == target:
            value = custom
    return value


def _replaced(
    key: str, rows: Sequence[ContactRow], contact: StoredContact
) -> Iterator[CompetitionRow]:
    """``replace``: a channel whose first values in the import drop stored values (the batch
    that marks the channel, as ``merge._plan_replace``)."""
    by_channel: dict[int, tuple[int, list[str]]] = {}  # channel → (first line, values)
    for row in rows:
        for detail in row.details:
            line, values = by_channel.setdefault(int(detail.channel), (row.line, []))
            if detail.value not in values:
                values.append(detail.value)
    for channel, (line, values) in sorted(by_channel.items()):
        if rules.channel_target(channel) in contact.marks:
            continue
        kept = set(values)
        if any(c == channel and v not in kept for c, v in contact.details):
            field = f"channel:{Channel(channel).name.lower()}"
            yield (key, field, " ".join(values), line, (), True, REPLACE_RULE)


# --- across batches -------------------------------------------------------------------------


def combine(competitions: Iterable[Competition]) -> Competition:
    """One (key, field)'s competitions in batch order as one report row.

    The field's value after a batch with a competition is that competition's winner, and it
    stays until the next one (a batch that changes a non-empty value to another competes), so
    a later batch's ``stored`` is the previous competition's winner: its line when it had one.
    The winner is the last batch's; the losing lines are every other line named.
    """
    losing: set[int] = set()
    loser_stored = False
    winner_line: int | None = None
    last: Competition | None = None
    sourced = False  # a source came after the last competition: the value changed since
    for competition in competitions:
        if competition.rule == SOURCE_RULE:  # a line gave the value, without a competition
            winner_line, sourced = competition.winner_line, True
            continue
        losing.update(competition.losing_lines)
        if competition.loser_stored:
            if winner_line is None:
                loser_stored = True
            else:
                losing.add(winner_line)
        if competition.winner_line is not None:
            winner_line = competition.winner_line
        elif last is not None and not sourced and last.winner_value != competition.winner_value:
            winner_line = None  # cannot happen by the argument above; never guess a line
        last, sourced = competition, False
    assert last is not None, "combine needs at least one competition"
    if winner_line is not None:
        losing.discard(winner_line)
    return Competition(
        last.key,
        last.field,
        last.winner_value,
        winner_line,
        tuple(sorted(losing)),
        loser_stored,
        last.rule,
    )


def combined(competitions: Iterable[Competition]) -> Iterator[Competition]:
    """Report rows from competitions (and sources) ordered by (key, field) then batch: one per
    (key, field) that competed."""
    group: list[Competition] = []
    for competition in competitions:
        if group and (group[0].key, group[0].field) != (competition.key, competition.field):
            yield from _reported(group)
            group = []
        group.append(competition)
    yield from _reported(group)


async def combined_stream(competitions: AsyncIterable[Competition]) -> AsyncIterator[Competition]:
    """:func:`combined` of a stream (the database's cursor), a group in memory at a time."""
    group: list[Competition] = []
    async for competition in competitions:
        if group and (group[0].key, group[0].field) != (competition.key, competition.field):
            for row in _reported(group):
                yield row
            group = []
        group.append(competition)
    for row in _reported(group):
        yield row


def _reported(group: Sequence[Competition]) -> Iterator[Competition]:
    """A (key, field)'s report row, if one of its entries is a competition (not a source)."""
    if any(c.rule != SOURCE_RULE for c in group):
        yield combine(group)


def source_competitions(
    sources: Iterable[SourceRow], competing: Mapping[str, Iterable[str]]
) -> Iterator[Competition]:
    """Sources as the entries :func:`combine` reads among competitions: one per field of theirs
    that competes (``competing``: key → the fields its competitions name; EVERY_FIELD: all)."""
    for key, line, fields in sources:
        for field in fields or competing.get(key, ()):
            yield Competition(key, field, None, line, (), False, SOURCE_RULE)


# --- the report's cells -----------------------------------------------------------------------


def winner_cell(competition: Competition) -> str:
    return STORED if competition.winner_line is None else str(competition.winner_line)


def losing_cell(competition: Competition) -> str:
    """The losing sources, space separated: lines, and ``stored`` when the stored value lost."""
    cells = [str(line) for line in competition.losing_lines]
    if competition.loser_stored:
        cells.append(STORED)
    return " ".join(cells)


def report_document(competition: Competition) -> dict[str, object]:
    """A report row as a JSON object (raw values: JSON is data, not a spreadsheet)."""
    return {
        "key": competition.key,
        "field": competition.field,
        "winner_value": competition.winner_value,
        "winner_line": competition.winner_line,  # null: the stored contact
        "losing_lines": list(competition.losing_lines),
        "loser_stored": competition.loser_stored,
        "rule": competition.rule,
    }
