"""The columns step: a suggested target per column of a file, and the mapping a user sets.

Pure: no I/O. A column's suggestion comes from the first source that knows it:

1. ``memory`` — this client mapped this header (``header_key``) before;
2. ``alias`` — the header is one of the known names of a target (``core.headers``, exact);
3. ``custom_field`` — the header is the name of one of the client's custom fields;
4. ``alias`` — the header's words name a target (``Telefone com DDD``);
5. ``values`` — the sampled values are mostly CPFs/CNPJs, e-mails or phones (``core.shapes``);
6. ``unmatched`` — a new custom field named after the header (or ``ignore`` when the header
   says nothing: ``Coluna 3`` would be a junk field).

Two columns never get one attribute or one custom field: the less confident one falls back to
step 6. A mapping the user sets (:func:`parse_mapping`) becomes the job's layout document
(:func:`mapping_layout`) and the memory of its headers (:func:`remembered`).
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from importer.core.errors import CustomFieldNotFoundError
from importer.core.headers import ALIAS_CONFIDENCE, TargetKind, match_header, says_nothing
from importer.core.layout import Layout, Target, column_targets, header_key
from importer.core.options import Problems
from importer.core.report import SOURCE_ERROR_COLUMN, neutralize
from importer.core.shapes import match_values

# Samples shown per column, and the characters kept of each.
SAMPLES_SHOWN = 5
SAMPLE_CHARS = 200
# The longest name a new custom field may be given.
MAX_FIELD_NAME_CHARS = 200

MEMORY_CONFIDENCE = 0.99
CUSTOM_FIELD_CONFIDENCE = 0.9
UNMATCHED_CONFIDENCE = 0.3
# A values suggestion is never surer than a header's words.
VALUES_WEIGHT = 0.9

# Targets one column at most may have (channels may repeat: two phone columns are two phones).
_SINGLE = frozenset((TargetKind.NAME, TargetKind.CPF_CNPJ, TargetKind.STREET_ADDRESS))
_CUSTOM = frozenset((TargetKind.CUSTOM_FIELD, TargetKind.NEW_CUSTOM_FIELD))


class SuggestionReason(StrEnum):
    MEMORY = "memory"
    ALIAS = "alias"
    CUSTOM_FIELD = "custom_field"
    VALUES = "values"
    UNMATCHED = "unmatched"


@dataclass(frozen=True, slots=True)
class CustomField:
    id: int
    name: str


@dataclass(frozen=True, slots=True)
class ColumnTarget:
    """A column's target; a custom one carries its field's name (and id when it exists)."""

    kind: TargetKind
    field_id: int | None = None
    field_name: str | None = None

    def word(self) -> str:
        """The layout document's word for it: ``email``, ``custom:Plano``, ``ignore``."""
        if self.kind in _CUSTOM:
            return f"custom:{self.field_name}"
        return self.kind.value

    def slot(self) -> str | None:
        """What two columns may not share: an attribute, or one custom field (by name)."""
        if self.kind in _SINGLE:
            return self.kind.value
        if self.kind in _CUSTOM and self.field_name is not None:
            return f"custom:{self.field_name.casefold()}"
        return None


IGNORE = ColumnTarget(TargetKind.IGNORE)


@dataclass(frozen=True, slots=True)
class Suggestion:
    target: ColumnTarget
    reason: SuggestionReason
    confidence: float
    share: float | None = None  # a values suggestion's share of matching samples


@dataclass(frozen=True, slots=True)
class SampledColumn:
    """A column of the file's head: its header and the values of its first rows."""

    position: int
    header: str
    values: tuple[str, ...] = ()

    @property
    def samples(self) -> tuple[str, ...]:
        """Up to five non-empty values as a spreadsheet may show them (formula-safe)."""
        present = (v.strip() for v in self.values if v.strip())
        shown = itertools.islice(present, SAMPLES_SHOWN)
        return tuple(neutralize(v[:SAMPLE_CHARS]) for v in shown)


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    """A client's remembered mapping of one header: how many imports used it, and when last."""

    header_key: str
    target: str  # a layout word
    uses: int
    last_used_at: dt.datetime


def memory_of(entries: Iterable[MemoryEntry]) -> dict[str, str]:
    """Header key → the word most imports used (the latest on a tie)."""
    best: dict[str, MemoryEntry] = {}
    for entry in entries:
        held = best.get(entry.header_key)
        if held is None or (entry.uses, entry.last_used_at) > (held.uses, held.last_used_at):
            best[entry.header_key] = entry
    return {key: entry.target for key, entry in best.items()}


@dataclass(frozen=True, slots=True)
class ClientColumns:
    """What the client's own data adds: its custom fields and its memory (key → word)."""

    custom_fields: tuple[CustomField, ...] = ()
    memory: Mapping[str, str] = field(default_factory=dict)

    def field_named(self, name: str) -> CustomField | None:
        key = header_key(name)
        return next((f for f in self.custom_fields if header_key(f.name) == key), None)


@dataclass(frozen=True, slots=True)
class ColumnView:
    column: SampledColumn
    suggestion: Suggestion


def from_word(word: str, known: ClientColumns) -> ColumnTarget | None:
    """A remembered or layout word as a target (None: a word this version does not know)."""
    if word.startswith("custom:") and word[7:].strip():
        return custom_target(word[7:].strip(), known)
    try:
        kind = TargetKind(word)
    except ValueError:
        return None
    return None if kind in _CUSTOM else ColumnTarget(kind)


def custom_target(name: str, known: ClientColumns) -> ColumnTarget:
    """The client's field of that name (case- and accent-insensitive), or a new one."""
    existing = known.field_named(name)
    if existing is not None:
        return ColumnTarget(TargetKind.CUSTOM_FIELD, existing.id, existing.name)
    return ColumnTarget(TargetKind.NEW_CUSTOM_FIELD, None, name)


def suggest(column: SampledColumn, known: ClientColumns) -> Suggestion:
    """The column's suggested target, from the first source that knows it (module doc)."""
    header = column.header.strip()
    remembered = known.memory.get(header_key(header)) if header else None
    target = from_word(remembered, known) if remembered is not None else None
    if target is not None:
        return Suggestion(target, SuggestionReason.MEMORY, MEMORY_CONFIDENCE)
    by_header = _by_header(header, known)
    if by_header is not None:
        return by_header
    shape = match_values(column.values)
    if shape is not None:
        confidence = round(shape.share * VALUES_WEIGHT, 3)
        return Suggestion(
            ColumnTarget(shape.kind), SuggestionReason.VALUES, confidence, shape.share
        )
    return unmatched(header, known)


def _by_header(header: str, known: ClientColumns) -> Suggestion | None:
    if header == SOURCE_ERROR_COLUMN:  # a fixed error report's reason column
        return Suggestion(IGNORE, SuggestionReason.ALIAS, ALIAS_CONFIDENCE)
    match = match_header(header)
    if match is not None and match.confidence >= ALIAS_CONFIDENCE:
        return Suggestion(ColumnTarget(match.kind), SuggestionReason.ALIAS, match.confidence)
    existing = known.field_named(header) if header else None
    if existing is not None:
        target = ColumnTarget(TargetKind.CUSTOM_FIELD, existing.id, existing.name)
        return Suggestion(target, SuggestionReason.CUSTOM_FIELD, CUSTOM_FIELD_CONFIDENCE)
    if match is not None:
        return Suggestion(ColumnTarget(match.kind), SuggestionReason.ALIAS, match.confidence)
    return None


def unmatched(header: str, known: ClientColumns) -> Suggestion:
    """A new custom field named after the header; ``ignore`` for a header that says nothing."""
    if says_nothing(header):
        return Suggestion(IGNORE, SuggestionReason.UNMATCHED, UNMATCHED_CONFIDENCE)
    return Suggestion(custom_target(header, known), SuggestionReason.UNMATCHED, 0.3)


def suggest_all(columns: Sequence[SampledColumn], known: ClientColumns) -> list[ColumnView]:
    """Every column's suggestion, no attribute or custom field given to two columns: the most
    confident keeps it (the first on a tie), the others fall back to :func:`unmatched`."""
    suggestions = [suggest(c, known) for c in columns]
    order = sorted(range(len(columns)), key=lambda i: (-suggestions[i].confidence, i))
    taken: set[str] = set()
    for index in order:
        slot = suggestions[index].target.slot()
        if slot is None:
            continue
        if slot in taken:
            fallback = unmatched(columns[index].header.strip(), known)
            fallback_slot = fallback.target.slot()
            suggestions[index] = fallback if fallback_slot not in taken else _ignored()
            slot = suggestions[index].target.slot()
        if slot is not None:
            taken.add(slot)
    return [ColumnView(c, s) for c, s in zip(columns, suggestions, strict=True)]


def _ignored() -> Suggestion:
    return Suggestion(IGNORE, SuggestionReason.UNMATCHED, UNMATCHED_CONFIDENCE)


# --- the mapping a user sets --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ColumnChoice:
    position: int
    target: ColumnTarget


_MAPPING_KEYS = ("columns",)
_CHOICE_KEYS = ("position", "target", "custom_field_id", "name")


def parse_mapping(
    body: Mapping[str, object], headers: Sequence[str], known: ClientColumns
) -> list[ColumnChoice]:
    """``{"columns": [{"position", "target", "custom_field_id"?, "name"?}]}`` checked against
    the file's headers and the client's fields. A column left out is ignored.

    Raises InvalidRequestError with every problem (400), or CustomFieldNotFoundError (404) for
    a custom field the client does not have.
    """
    problems = Problems()
    for name in body:
        if name not in _MAPPING_KEYS:
            problems.add(name, "unknown field")
    raw = body.get("columns")
    if not isinstance(raw, list):
        problems.add("columns", "must be a list of {position, target}")
        problems.raise_any()
        return []
    choices = [_choice(item, i, headers, known, problems) for i, item in enumerate(raw)]
    found = [c for c in choices if c is not None]
    _check_unique(found, problems)
    problems.raise_any()
    return found


def _choice(
    item: object, index: int, headers: Sequence[str], known: ClientColumns, problems: Problems
) -> ColumnChoice | None:
    where = f"columns.{index}"
    if not isinstance(item, Mapping):
        problems.add(where, "must be an object {position, target}")
        return None
    for name in item:
        if name not in _CHOICE_KEYS:
            problems.add(f"{where}.{name}", "unknown field")
    position = item.get("position")
    if isinstance(position, bool) or not isinstance(position, int):
        problems.add(f"{where}.position", "must be a column's position (0-based)")
        return None
    if not 0 <= position < len(headers):
        problems.add(f"{where}.position", f"the file has {len(headers)} columns")
        return None
    target = _target(item, headers[position], known, where, problems)
    return None if target is None else ColumnChoice(position, target)


def _target(
    item: Mapping[str, object], header: str, known: ClientColumns, where: str, problems: Problems
) -> ColumnTarget | None:
    word = item.get("target")
    try:
        kind = TargetKind(str(word))
    except ValueError:
        known_words = ", ".join(k.value for k in TargetKind)
        problems.add(f"{where}.target", f"unknown target {word!r}; known: {known_words}")
        return None
    if kind is TargetKind.CUSTOM_FIELD:
        return _existing_field(item.get("custom_field_id"), known, where, problems)
    if kind is TargetKind.NEW_CUSTOM_FIELD:
        return _new_field(item.get("name", header), known, where, problems)
    return ColumnTarget(kind)


def _existing_field(
    field_id: object, known: ClientColumns, where: str, problems: Problems
) -> ColumnTarget | None:
    if isinstance(field_id, bool) or not isinstance(field_id, int):
        problems.add(f"{where}.custom_field_id", "is required for target custom_field")
        return None
    existing = next((f for f in known.custom_fields if f.id == field_id), None)
    if existing is None:
        raise CustomFieldNotFoundError(
            f"custom field {field_id} does not exist", field=f"{where}.custom_field_id"
        )
    return ColumnTarget(TargetKind.CUSTOM_FIELD, existing.id, existing.name)


def _new_field(
    name: object, known: ClientColumns, where: str, problems: Problems
) -> ColumnTarget | None:
    text = name.strip() if isinstance(name, str) else ""
    if not text or len(text) > MAX_FIELD_NAME_CHARS or text == SOURCE_ERROR_COLUMN:
        problems.add(f"{where}.name", "a new custom field needs a name (1 to 200 characters)")
        return None
    return custom_target(text, known)


def _check_unique(choices: Sequence[ColumnChoice], problems: Problems) -> None:
    positions: dict[int, int] = {}
    slots: dict[str, int] = {}
    for index, choice in enumerate(choices):
        if choice.position in positions:
            problems.add(f"columns.{index}.position", f"column {choice.position} is mapped twice")
        positions[choice.position] = index
        slot = choice.target.slot()
        if slot is None:
            continue
        if slot in slots:
            problems.add(
                f"columns.{index}.target",
                f"{choice.target.word()} is already mapped from column"
                f" {choices[slots[slot]].position}",
            )
        slots.setdefault(slot, index)


def source_of(position: int, headers: Sequence[str]) -> int | str:
    """How a layout names a column: its header when it has one, else its position."""
    header = headers[position].strip()
    return header if header else position


def mapping_layout(
    choices: Iterable[ColumnChoice], headers: Sequence[str], base: Mapping[str, object] | None
) -> dict[str, object]:
    """The job's layout document: the base's options (delimiter, merge, key…) with every column
    named, those left out as ``ignore`` (a header alias would otherwise still map them), and
    ``"unmapped": "ignore"`` for keys a JSON Lines file's head did not show."""
    words = {c.position: _layout_word(c.target) for c in choices}
    document = dict(base or {})
    document["columns"] = [
        {"column": source_of(i, headers), "target": words.get(i, "ignore")}
        for i in range(len(headers))
    ]
    document["unmapped"] = "ignore"
    return document


def _layout_word(target: ColumnTarget) -> str:
    return "ignore" if target.kind is TargetKind.IGNORE else target.word()


def remembered(choices: Iterable[ColumnChoice], headers: Sequence[str]) -> list[tuple[str, str]]:
    """(header key, word) of every named column, a column left out as ``ignore``: what the
    client's memory learns when the import completes."""
    words = {c.position: c.target.word() for c in choices}
    pairs = {header_key(h): words.get(i, IGNORE.word()) for i, h in enumerate(headers)}
    return sorted((key, word) for key, word in pairs.items() if key)


def import_targets(
    layout: Layout | None, headers: Sequence[str], known: ClientColumns
) -> list[ColumnTarget]:
    """What the import does with each column as things stand: the layout's mapping (a
    mapping set in the columns step, or the job's own layout), the other columns by the
    import's header aliases (``core.layout``), never by the suggestions."""
    return [_column_target(t, known) for t in column_targets(headers, layout)]


def _column_target(target: Target | None, known: ClientColumns) -> ColumnTarget:
    if target is None:
        return IGNORE
    if target.custom is not None:
        return custom_target(target.custom, known)
    if target.attribute is not None:
        return ColumnTarget(TargetKind(target.attribute.value))
    assert target.channel is not None
    return ColumnTarget(TargetKind(target.channel.name.lower()))
