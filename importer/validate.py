"""Records → normalized rows and row issues: header mapping, layouts and the row builder.

Pure: no I/O. The hot path is :meth:`RowBuilder.build`, called once per record.
"""

from __future__ import annotations

import codecs
import dataclasses
import difflib
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MemberDescriptorType
from typing import Final

from importer.exceptions import FileRejectedError, LayoutError
from importer.models import (
    Attribute,
    Channel,
    ContactRow,
    Detail,
    Reason,
    RowIssue,
    Severity,
)
from importer.normalize import (
    PhoneParts,
    normalize_cpf_cnpj,
    normalize_email,
    normalize_phone_parts,
)


@dataclass(frozen=True, slots=True)
class Target:
    """What a column maps to: exactly one of a contact attribute, a channel or a custom field."""

    attribute: Attribute | None = None
    channel: Channel | None = None
    custom: str | None = None


_ALIASES: dict[str, Target] = {}
for _names, _target in (
    (("nome", "name", "nome_completo", "full_name"), Target(attribute=Attribute.NAME)),
    (
        ("cpf", "cnpj", "documento", "document", "cpf_cnpj", "cpfcnpj", "cpf_ou_cnpj", "doc"),
        Target(attribute=Attribute.CPF_CNPJ),
    ),
    (
        ("endereco", "street_address", "address", "logradouro", "endereco_completo"),
        Target(attribute=Attribute.STREET_ADDRESS),
    ),
    (("email", "e_mail", "mail", "correio_eletronico"), Target(channel=Channel.EMAIL)),
    (
        ("telefone", "celular", "phone", "fone", "tel", "cel", "mobile", "sms"),
        Target(channel=Channel.PHONE),
    ),
    (("whatsapp", "whats", "wpp", "zap", "whatsapp_number"), Target(channel=Channel.WHATSAPP)),
    (("jornada", "journey"), Target(channel=Channel.JOURNEY)),
):
    for _name in _names:
        _ALIASES[_name] = _target

_TARGET_WORDS: dict[str, Target] = {
    "name": Target(attribute=Attribute.NAME),
    "cpf_cnpj": Target(attribute=Attribute.CPF_CNPJ),
    "street_address": Target(attribute=Attribute.STREET_ADDRESS),
    "phone": Target(channel=Channel.PHONE),
    "whatsapp": Target(channel=Channel.WHATSAPP),
    "email": Target(channel=Channel.EMAIL),
    "journey": Target(channel=Channel.JOURNEY),
}

_SEPARATORS = re.compile(r"[\s\-_./]+")


def header_key(name: str) -> str:
    """Case-, space- and accent-insensitive form of a header name: ``E-mail`` → ``e_mail``."""
    decomposed = unicodedata.normalize("NFKD", name.strip().lower())
    bare = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return _SEPARATORS.sub("_", bare).strip("_")


def target_for_header(name: str) -> Target:
    """The alias target of a header, or a custom field named after the column."""
    return _ALIASES.get(header_key(name)) or Target(custom=name.strip())


@dataclass(frozen=True, slots=True)
class LayoutColumn:
    source: int | str  # a 0-based position or a header name
    target: Target | None  # None: the column is ignored


@dataclass(frozen=True, slots=True)
class Layout:
    """A client's import layout (``--layout FILE`` or ``import_layout``)."""

    columns: tuple[LayoutColumn, ...] = ()
    delimiter: str | None = None
    encoding: str | None = None
    has_header: bool = True
    unmapped_as_custom: bool = True
    sheet: str | int | None = None  # XLSX: the sheet's name or 0-based position (None: the first)


def parse_target(word: str) -> Target | None:
    """``name``, ``phone``, ``custom:Plano``, ``ignore`` … → a Target (None for ignore)."""
    text = word.strip()
    if text.lower() == "ignore":
        return None
    if text.lower().startswith("custom:") and text[7:].strip():
        return Target(custom=text[7:].strip())
    target = _TARGET_WORDS.get(text.lower().removeprefix("channel:"))
    if target is None:
        known = [*_TARGET_WORDS, "custom:<field>", "ignore"]
        near = difflib.get_close_matches(text.lower(), known, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else f"; known: {', '.join(known)}"
        raise LayoutError(f"unknown layout target {word!r}{hint}")
    return target


# The keys a layout document may hold: anything else is a misspelling, refused by name (a silently
# ignored ``"delimeter"`` would run the import with defaults).
LAYOUT_KEYS = ("columns", "delimiter", "encoding", "header", "unmapped", "sheet")
_COLUMN_KEYS = ("column", "target")


def _refuse_unknown_keys(keys: Iterable[object], known: Sequence[str], where: str) -> None:
    for key in keys:
        if key not in known:
            near = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else f"; known: {', '.join(known)}"
            raise LayoutError(f"unknown key {key!r} in {where}{hint}", f"{where}.{key}")


def parse_layout(document: Mapping[str, object]) -> Layout:
    """Validate a JSON layout document; raise :class:`LayoutError` with the field at fault."""
    _refuse_unknown_keys(document, LAYOUT_KEYS, "layout")
    raw_columns = document.get("columns", [])
    items: list[object]
    if isinstance(raw_columns, Mapping):
        items = list(raw_columns.items())
    elif isinstance(raw_columns, list):
        items = raw_columns
    else:
        raise LayoutError("layout.columns must be a list or an object")
    parsed = tuple(_layout_column(item, i) for i, item in enumerate(items))
    delimiter = _optional_str(document, "delimiter")
    if delimiter is not None and delimiter not in (",", ";", "\t", "|"):
        raise LayoutError("layout.delimiter must be one of , ; TAB |", "layout.delimiter")
    has_header = document.get("header", True)
    if not isinstance(has_header, bool):
        raise LayoutError("layout.header must be true or false", "layout.header")
    unmapped = document.get("unmapped", "custom")
    if unmapped not in ("custom", "ignore"):
        raise LayoutError("layout.unmapped must be 'custom' or 'ignore'", "layout.unmapped")
    return Layout(
        parsed,
        delimiter,
        _layout_encoding(document),
        has_header,
        unmapped == "custom",
        _sheet(document.get("sheet")),
    )


def _layout_encoding(document: Mapping[str, object]) -> str | None:
    """The layout's charset, checked against Python's codec registry (``utf8x`` is refused)."""
    encoding = _optional_str(document, "encoding")
    if encoding is not None:
        try:
            codecs.lookup(encoding)
        except LookupError:
            raise LayoutError(
                f"layout.encoding {encoding!r} is not a known character set", "layout.encoding"
            ) from None
    return encoding


def _sheet(value: object) -> str | int | None:
    """An XLSX layout's ``sheet``: a name, or a 0-based position."""
    if value is None:
        return None
    where = "layout.sheet"
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise LayoutError("layout.sheet must be a sheet name or a 0-based position", where)
    if isinstance(value, int) and value < 0:
        raise LayoutError("layout.sheet position must be 0 or more", where)
    if isinstance(value, str) and not value.strip():
        raise LayoutError("layout.sheet must not be empty", where)
    return value


def _layout_column(item: object, position: int) -> LayoutColumn:
    where = f"layout.columns.{position}"
    if isinstance(item, tuple):  # {"Header": "target"} form
        source, word = item
        where = f"layout.columns.{source}"
    elif isinstance(item, Mapping):
        _refuse_unknown_keys(item, _COLUMN_KEYS, where)
        source, word = item.get("column"), item.get("target")
    else:
        raise LayoutError("each layout column must be an object {column, target}", where)
    if isinstance(source, str) and source.strip().isdigit():
        source = int(source)
    if not isinstance(source, int | str) or isinstance(source, bool) or not isinstance(word, str):
        raise LayoutError("a layout column needs 'column' (name or position) and 'target'", where)
    if isinstance(source, int) and source < 0:
        raise LayoutError("a layout column position must be 0 or more", where)
    try:
        return LayoutColumn(source, parse_target(word))
    except LayoutError as exc:
        raise LayoutError(str(exc), where) from None


def _optional_str(document: Mapping[str, object], key: str) -> str | None:
    value = document.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise LayoutError(f"layout.{key} must be a string", f"layout.{key}")
    return value


@dataclass(frozen=True, slots=True)
class Column:
    index: int
    name: str
    target: Target


@dataclass(frozen=True, slots=True)
class RowPlan:
    """How a record's fields become a row: the mapped columns and the expected field count."""

    columns: tuple[Column, ...]
    field_count: int | None

    @property
    def custom_names(self) -> tuple[str, ...]:
        return tuple(c.target.custom for c in self.columns if c.target.custom is not None)


def plan_for_header(header: Sequence[str], layout: Layout | None, max_columns: int) -> RowPlan:
    """Map a CSV header; raise FileRejectedError for duplicate or missing required columns."""
    if len(header) > max_columns:
        raise FileRejectedError(Reason.TOO_MANY_COLUMNS, f"{len(header)} columns > {max_columns}")
    names = [h.strip() for h in header]
    _reject_duplicate_names(names)
    explicit = _explicit_targets(names, layout)
    unmapped_as_custom = layout is None or layout.unmapped_as_custom
    columns: list[Column] = []
    for index, name in enumerate(names):
        target = (
            explicit[index] if index in explicit else _implicit_target(name, unmapped_as_custom)
        )
        if target is not None:
            columns.append(Column(index, name or f"column_{index + 1}", target))
    return _checked_plan(columns, len(names))


def plan_for_positions(field_count: int, layout: Layout) -> RowPlan:
    """Map a header-less CSV by the layout's positions."""
    columns = [
        Column(c.source, f"column_{c.source + 1}", c.target)
        for c in layout.columns
        if isinstance(c.source, int) and c.target is not None
    ]
    if any(c.index >= field_count for c in columns):
        raise FileRejectedError(Reason.INVALID_LAYOUT, "a layout position is past the last column")
    return _checked_plan(columns, field_count)


def plan_for_keys(keys: Sequence[str], layout: Layout | None) -> RowPlan:
    """Map a JSONL object's keys (no field count: objects may differ)."""
    explicit = _explicit_targets(list(keys), layout)
    unmapped_as_custom = layout is None or layout.unmapped_as_custom
    columns = []
    for index, key in enumerate(keys):
        target = explicit[index] if index in explicit else _implicit_target(key, unmapped_as_custom)
        if target is not None:
            columns.append(Column(index, key, target))
    _reject_duplicate_attributes(columns)
    return RowPlan(tuple(columns), None)


def _implicit_target(name: str, unmapped_as_custom: bool) -> Target | None:
    """A column the layout does not name: its alias, else a custom field (unless ignored)."""
    if not name.strip():
        return None
    target = target_for_header(name)
    if target.custom is not None and not unmapped_as_custom:
        return None
    return target


def _explicit_targets(names: Sequence[str], layout: Layout | None) -> dict[int, Target | None]:
    """The layout's columns by position; None marks a column the layout ignores."""
    if layout is None:
        return {}
    by_key = {header_key(n): i for i, n in enumerate(names)}
    explicit: dict[int, Target | None] = {}
    for column in layout.columns:
        index = (
            column.source
            if isinstance(column.source, int)
            else by_key.get(header_key(column.source))
        )
        if index is None or index >= len(names):
            continue
        explicit[index] = column.target
    return explicit


def _reject_duplicate_names(names: Sequence[str]) -> None:
    seen: set[str] = set()
    for name in names:
        key = header_key(name)
        if key and key in seen:
            raise FileRejectedError(Reason.DUPLICATE_COLUMN, f"column {name!r} appears twice")
        seen.add(key)


def _reject_duplicate_attributes(columns: Sequence[Column]) -> None:
    seen: dict[Attribute, str] = {}
    for column in columns:
        attribute = column.target.attribute
        if attribute is None:
            continue
        if attribute in seen:
            raise FileRejectedError(
                Reason.DUPLICATE_COLUMN,
                f"columns {seen[attribute]!r} and {column.name!r} both map to {attribute.value}",
            )
        seen[attribute] = column.name


def _checked_plan(columns: list[Column], field_count: int) -> RowPlan:
    _reject_duplicate_attributes(columns)
    if not any(c.target.attribute is Attribute.CPF_CNPJ for c in columns):
        raise FileRejectedError(Reason.MISSING_REQUIRED_COLUMN, "no cpf_cnpj column")
    return RowPlan(tuple(columns), field_count)


_MAX_CHANNEL_CHARS = 320

# Detail and ContactRow are frozen dataclasses: their __init__ sets each field through
# object.__setattr__, which looks the field up by name; for the three or four of them a row
# makes, that costs about as much as normalizing its key. The builder makes them as __init__
# does, minus the lookups: object.__new__, then each slot's own setter. _slot_setters()
# checks that this is all __init__ does, so that a change to the models fails at import.
_Setter = Callable[[object, object], None]
_new = object.__new__


def _slot_setters(cls: type, names: tuple[str, ...]) -> tuple[_Setter, ...]:
    """The setters of a slotted dataclass's fields, which must be ``names`` in this order."""
    fields = tuple(f.name for f in dataclasses.fields(cls))
    slots = [vars(cls).get(name) for name in names]
    plain = all(isinstance(slot, MemberDescriptorType) for slot in slots)
    if fields != names or not plain or hasattr(cls, "__post_init__"):
        raise RuntimeError(f"{cls.__name__} is not the plain dataclass the row builder makes")
    return tuple(slot.__set__ for slot in slots if isinstance(slot, MemberDescriptorType))


_DETAIL_SETTERS: Final = _slot_setters(Detail, ("channel", "value", "country_code", "country"))
_ROW_SETTERS: Final = _slot_setters(
    ContactRow, ("line", "cpf_cnpj", "name", "street_address", "details", "custom_fields")
)


def _detail(
    channel: Channel, value: str, country_code: int | None = None, country: str | None = None
) -> Detail:
    """``Detail(channel, value, country_code, country)``, twice as fast."""
    detail: Detail = _new(Detail)
    set_channel, set_value, set_country_code, set_country = _DETAIL_SETTERS
    set_channel(detail, channel)
    set_value(detail, value)
    set_country_code(detail, country_code)
    set_country(detail, country)
    return detail


def _contact_row(
    line: int,
    cpf_cnpj: str,
    name: str | None,
    street_address: str | None,
    details: tuple[Detail, ...],
    custom_fields: tuple[tuple[str, str], ...],
) -> ContactRow:
    """``ContactRow(...)`` with every field given, twice as fast."""
    row: ContactRow = _new(ContactRow)
    set_line, set_key, set_name, set_address, set_details, set_custom = _ROW_SETTERS
    set_line(row, line)
    set_key(row, cpf_cnpj)
    set_name(row, name)
    set_address(row, street_address)
    set_details(row, details)
    set_custom(row, custom_fields)
    return row


# The row builder's column kinds, in the order build() tests them: customs are the most
# frequent columns, then phones.
_CUSTOM: Final = 0
_PHONE: Final = 1  # phone and whatsapp
_NAME: Final = 2
_ADDRESS: Final = 3
_KEY: Final = 4
_EMAIL: Final = 5
_JOURNEY: Final = 6
_KINDS: Final[dict[Attribute | Channel, int]] = {
    Attribute.CPF_CNPJ: _KEY,
    Attribute.NAME: _NAME,
    Attribute.STREET_ADDRESS: _ADDRESS,
    Channel.PHONE: _PHONE,
    Channel.WHATSAPP: _PHONE,
    Channel.EMAIL: _EMAIL,
    Channel.JOURNEY: _JOURNEY,
}
# A column as the row builder reads it, a plain tuple (named ones unpack slower): the
# field's index in the record, the kind, the column's name (for issues), the channel of its
# details (channel columns; PHONE for others), the custom field's name (custom columns).
_Column = tuple[int, int, str, Channel, str]


def _column(column: Column) -> _Column:
    target = column.target
    mapped = target.attribute or target.channel
    if mapped is None:
        assert target.custom is not None
        return (column.index, _CUSTOM, column.name, Channel.PHONE, target.custom)
    return (column.index, _KINDS[mapped], column.name, target.channel or Channel.PHONE, "")


class RowBuilder:
    """Turns one record's fields into a ContactRow and its issues, following a RowPlan."""

    def __init__(self, plan: RowPlan, *, international: bool, max_value_chars: int) -> None:
        self.plan = plan
        self._international = international
        self._max_value = max_value_chars
        self._columns = tuple(_column(c) for c in plan.columns)
        self._width = max((c.index + 1 for c in plan.columns), default=0)
        self._key_column = (
            next(c.name for c in plan.columns if c.target.attribute is Attribute.CPF_CNPJ)
            if plan.field_count is not None
            else "cpf_cnpj"
        )

    def build(  # noqa: PLR0912, PLR0915 - the hot path: see the comment inside
        self, line: int, fields: Sequence[str]
    ) -> tuple[ContactRow | None, list[RowIssue]]:
        """One record → (row or None when invalid, issues). Never raises on content.

        Issues come in column order, a missing key's first; details and custom fields in
        column order too. An empty (or blank) value is no value.
        """
        expected = self.plan.field_count
        if expected is not None and len(fields) != expected:
            reason = Reason.TOO_MANY_FIELDS if len(fields) > expected else Reason.TOO_FEW_FIELDS
            detail = f"{len(fields)} fields, header has {expected}"
            return None, [RowIssue(line, None, reason, detail, Severity.INVALID)]
        if len(fields) < self._width:  # a record without some columns: their values are empty
            fields = [*fields, *[""] * (self._width - len(fields))]
        # Called once per record: the hot path of an import, hence one long function. Each
        # column's kind is tested in place, in one loop over plain tuples: per-column
        # closures and a per-row state object cost nearly as much as the normalizers
        # (benchmarks/bench_build.py).
        limit = self._max_value
        key: str | Reason | None = None
        name: str | None = None
        street_address: str | None = None
        details: list[Detail] = []
        custom: list[tuple[str, str]] = []
        issues: list[RowIssue] = []
        # A phone column whose value equals the previous phone column's in this row (the
        # whatsapp column often repeats the phone column) reuses its result.
        phone_raw: str | None = None
        phone: PhoneParts | None = None
        for index, kind, column, channel, field in self._columns:
            value = fields[index].strip()
            if not value:
                continue
            if kind == _CUSTOM:
                if len(value) <= limit:
                    custom.append((field, value))
                else:
                    issues.append(_warning(line, column, Reason.VALUE_TOO_LONG, value))
            elif kind == _PHONE:
                if value != phone_raw:
                    phone_raw = value
                    phone = normalize_phone_parts(value, international=self._international)
                if phone is not None:
                    details.append(_detail(channel, phone[0], phone[1], phone[2]))
                else:
                    issues.append(_warning(line, column, Reason.INVALID_PHONE, value))
            elif kind == _NAME:
                if len(value) <= limit:
                    name = value
                else:
                    issues.append(_warning(line, column, Reason.VALUE_TOO_LONG, value))
            elif kind == _ADDRESS:
                if len(value) <= limit:
                    street_address = value
                else:
                    issues.append(_warning(line, column, Reason.VALUE_TOO_LONG, value))
            elif kind == _KEY:
                key = normalize_cpf_cnpj(value)
                if type(key) is Reason:  # isinstance() is slow on enum classes
                    issues.append(RowIssue(line, column, key, value, Severity.INVALID))
            elif kind == _EMAIL:
                email = normalize_email(value) if len(value) <= _MAX_CHANNEL_CHARS else None
                if email is not None:
                    details.append(_detail(channel, email))
                else:
                    issues.append(_warning(line, column, Reason.INVALID_EMAIL, value))
            elif len(value) <= _MAX_CHANNEL_CHARS:  # _JOURNEY
                details.append(_detail(channel, value))
            else:
                issues.append(_warning(line, column, Reason.VALUE_TOO_LONG, value))
        if key is None:
            key = Reason.MISSING_CPF_CNPJ
            issues.insert(0, RowIssue(line, self._key_column, key, None, Severity.INVALID))
        if type(key) is Reason:
            return None, issues
        row = _contact_row(line, key, name, street_address, tuple(details), tuple(custom))
        return row, issues


_REPORT_VALUE_CHARS = 1024


def _warning(line: int, column: str, reason: Reason, value: str) -> RowIssue:
    return RowIssue(line, column, reason, value[:_REPORT_VALUE_CHARS], Severity.WARNING)


def record_issue(line: int, reason: Reason, raw: str) -> RowIssue:
    """The issue of a record the reader could not decode or parse."""
    return RowIssue(line, None, reason, raw[:_REPORT_VALUE_CHARS], Severity.INVALID)
