"""The dedupe key of an import: the CPF/CNPJ (the default) or one channel, and what follows.

A layout's ``"key"`` names it: ``cpf_cnpj``, ``email``, ``phone`` or ``whatsapp``. Under a
channel key a row's key is the normalized value of the layout's one column of that channel
(``ContactRow.cpf_cnpj`` carries it: the slot is "the key"), and a row is matched against the
client's live contacts that have that value in that channel, not by a column of ``contact``:

- a row without a valid value of it is invalid ``missing_key`` (an invalid e-mail or phone in
  the key column makes the row invalid with that reason, not a warning);
- a value two live stored contacts share makes the row invalid ``ambiguous_key`` (never a
  guess); several values of the file that belong to one stored contact merge into it, in file
  order (:func:`unify`);
- the rows of one stored contact meet in one key partition (:class:`KeyGroups`), so a channel
  key runs in as many partitions as the CPF/CNPJ;
- contacts are created without a CPF/CNPJ; a CPF/CNPJ column is refused under a channel key
  (which of two contacts a CPF would then belong to is not ours to decide), and so is
  ``replace`` on the key channel (it would drop the value the contact was found by).

Pure: no I/O.
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from importer.core.errors import LayoutError
from importer.core.models import (
    Channel,
    ContactRow,
    Detail,
    Reason,
    RowIssue,
    Severity,
    new_contact_row,
)


class DedupeKey(enum.StrEnum):
    CPF_CNPJ = "cpf_cnpj"
    EMAIL = "email"
    PHONE = "phone"
    WHATSAPP = "whatsapp"

    @classmethod
    def of(cls, channel: Channel) -> DedupeKey:
        """The key a channel is (email, phone, whatsapp)."""
        return cls(channel.name.lower())

    @property
    def channel(self) -> Channel | None:
        """The channel the key is a value of (None: the CPF/CNPJ column)."""
        return _CHANNELS.get(self)


_CHANNELS = {
    DedupeKey.EMAIL: Channel.EMAIL,
    DedupeKey.PHONE: Channel.PHONE,
    DedupeKey.WHATSAPP: Channel.WHATSAPP,
}


def parse_key(value: object) -> DedupeKey:
    """A layout's ``"key"`` (absent: the CPF/CNPJ)."""
    if value is None:
        return DedupeKey.CPF_CNPJ
    try:
        return DedupeKey(value) if isinstance(value, str) else DedupeKey("")
    except ValueError:
        known = ", ".join(k.value for k in DedupeKey)
        raise LayoutError(f"layout.key must be one of {known}", "layout.key") from None


def key_channel_of(layout: Mapping[str, object] | None) -> Channel | None:
    """The key channel of a job's layout document (None: the CPF/CNPJ). The run parsed the
    same document before its first batch, so a bad one never gets here."""
    return None if layout is None else parse_key(layout.get("key")).channel


# Key values of multi-valued stored contacts a run keeps (KeyGroups): read, ~70 MB at the peak.
MAX_GROUPED_VALUES = 200_000


@dataclass(frozen=True, slots=True)
class KeyGroups:
    """How a channel key's rows find their key partition: the rows of one stored contact must
    meet in one partition (its batches apply in line order; two partitions would race for it).

    A stored contact with one live value of the key channel needs nothing: its rows share that
    key, whose hash is the partition, as a new contact's rows do. Only a contact with several
    values does: each of them maps to its ``canonical`` one (the contact's smallest), hashed
    instead. ``whole``: the client has more of those values than a run keeps
    (:data:`MAX_GROUPED_VALUES`), and every row goes to partition 0 (one consumer, exact).

    An import never adds a value of its key channel to a stored contact (a row's key value is
    already its contact's; ``replace`` on the key channel is refused) and creates contacts with
    one value each, so its own writes never change the groups; the job's first run reads them
    before its first batch and keeps them as long as the ledger (``import_key_groups``), so every
    run resuming from the ledger cuts the same batches whatever another writer did in between
    (one that gives a contact a second value meanwhile may see that contact's rows of the rest
    of the file applied in two partitions: another writer's race, as under any key).
    """

    canonical: Mapping[str, str] = field(default_factory=dict)
    whole: bool = False

    def partition(self, key: str, partitions: int) -> int:
        """The key partition of a row's (normalized) key."""
        if self.whole:
            return 0
        return zlib.crc32(self.canonical.get(key, key).encode()) % partitions


NO_GROUPS = KeyGroups()


def key_groups(values: Iterable[tuple[int, str]]) -> KeyGroups:
    """The groups of the (contact id, value) pairs of the client's stored contacts that have
    several live values of the key channel: each value → its contact's smallest value (a value
    two such contacts share → the smaller of theirs; its rows are ``ambiguous_key`` anyway).
    Past :data:`MAX_GROUPED_VALUES` pairs, ``whole``."""
    smallest: dict[int, str] = {}
    pairs: list[tuple[int, str]] = []
    for count, (contact, value) in enumerate(values, 1):
        if count > MAX_GROUPED_VALUES:
            return KeyGroups(whole=True)
        pairs.append((contact, value))
        if contact not in smallest or value < smallest[contact]:
            smallest[contact] = value
    canonical: dict[str, str] = {}
    for contact, value in pairs:
        first = smallest[contact]
        if value not in canonical or first < canonical[value]:
            canonical[value] = first
    return KeyGroups({v: c for v, c in canonical.items() if v != c})


def keyed_by_channel(
    line: int,
    channel: Channel,
    column: str,
    details: Sequence[Detail],
    issues: list[RowIssue],
) -> str | None:
    """A row's key under a channel key: the first value of ``channel`` among its ``details``
    (the key column's; the layout maps exactly one column to it). None: the row is invalid, and
    ``issues`` says why — the key column's warning turned invalid, else ``missing_key``."""
    for detail in details:
        if detail.channel is channel:
            return detail.value
    for i, issue in enumerate(issues):
        if issue.column == column and issue.severity is Severity.WARNING:
            issues[i] = RowIssue(line, column, issue.reason, issue.value, Severity.INVALID)
            return None
    issues.insert(0, RowIssue(line, column, Reason.MISSING_KEY, None, Severity.INVALID))
    return None


def unify(rows: Sequence[ContactRow], contact_of: Mapping[str, int]) -> list[ContactRow]:
    """The rows with every key that resolves to a stored contact another key of ``rows`` also
    resolves to rewritten to the smallest such key, so the fold merges them into one (in file
    order). ``contact_of``: key → the stored contact it resolves to."""
    keys_of: dict[int, list[str]] = {}
    for key in sorted({r.cpf_cnpj for r in rows if r.cpf_cnpj in contact_of}):
        keys_of.setdefault(contact_of[key], []).append(key)
    canonical = {key: keys[0] for keys in keys_of.values() if len(keys) > 1 for key in keys}
    if not canonical:
        return list(rows)
    return [
        row
        if row.cpf_cnpj not in canonical
        else new_contact_row(
            row.line,
            canonical[row.cpf_cnpj],
            row.name,
            row.street_address,
            row.details,
            row.custom_fields,
        )
        for row in rows
    ]


def ambiguous_issue(row: ContactRow, channel: Channel) -> RowIssue:
    """The invalid issue of a row whose key two stored contacts share (its column: the key's
    name, as the batch that finds it out no longer knows the file's)."""
    column = DedupeKey.of(channel).value
    return RowIssue(row.line, column, Reason.AMBIGUOUS_KEY, row.cpf_cnpj[:1024], Severity.INVALID)
