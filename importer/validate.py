"""Records → normalized rows and row issues: header mapping, layouts and the row builder.

Pure: no I/O. The hot path is :meth:`RowBuilder.build`, called once per record.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

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
from importer.normalize import normalize_cpf_cnpj, normalize_email, normalize_phone


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


def parse_target(word: str) -> Target | None:
    """``name``, ``phone``, ``custom:Plano``, ``ignore`` … → a Target (None for ignore)."""
    text = word.strip()
    if text.lower() == "ignore":
        return None
    if text.lower().startswith("custom:") and text[7:].strip():
        return Target(custom=text[7:].strip())
    target = _TARGET_WORDS.get(text.lower().removeprefix("channel:"))
    if target is None:
        raise LayoutError(f"unknown layout target {word!r}")
    return target


def parse_layout(document: Mapping[str, object]) -> Layout:
    """Validate a JSON layout document; raise :class:`LayoutError` with the field at fault."""
    raw_columns = document.get("columns", [])
    items: list[object]
    if isinstance(raw_columns, Mapping):
        items = list(raw_columns.items())
    elif isinstance(raw_columns, list):
        items = raw_columns
    else:
        raise LayoutError("layout.columns must be a list or an object")
    parsed = tuple(_layout_column(item) for item in items)
    delimiter = _optional_str(document, "delimiter")
    if delimiter is not None and delimiter not in (",", ";", "\t", "|"):
        raise LayoutError("layout.delimiter must be one of , ; TAB |")
    has_header = document.get("header", True)
    if not isinstance(has_header, bool):
        raise LayoutError("layout.header must be true or false")
    unmapped = document.get("unmapped", "custom")
    if unmapped not in ("custom", "ignore"):
        raise LayoutError("layout.unmapped must be 'custom' or 'ignore'")
    return Layout(
        parsed, delimiter, _optional_str(document, "encoding"), has_header, unmapped == "custom"
    )


def _layout_column(item: object) -> LayoutColumn:
    if isinstance(item, tuple):  # {"Header": "target"} form
        source, word = item
    elif isinstance(item, Mapping):
        source, word = item.get("column"), item.get("target")
    else:
        raise LayoutError("each layout column must be an object {column, target}")
    if isinstance(source, str) and source.strip().isdigit():
        source = int(source)
    if not isinstance(source, int | str) or isinstance(source, bool) or not isinstance(word, str):
        raise LayoutError("a layout column needs 'column' (name or position) and 'target'")
    if isinstance(source, int) and source < 0:
        raise LayoutError("a layout column position must be 0 or more")
    return LayoutColumn(source, parse_target(word))


def _optional_str(document: Mapping[str, object], key: str) -> str | None:
    value = document.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise LayoutError(f"layout.{key} must be a string")
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

# Per-column step of the row builder: (value, row state) → issue or None.
_Step = Callable[[str, "_RowState"], RowIssue | None]


class _RowState:
    __slots__ = ("custom", "details", "key", "line", "name", "street_address")

    def __init__(self, line: int) -> None:
        self.line = line
        self.key: str | Reason | None = None
        self.name: str | None = None
        self.street_address: str | None = None
        self.details: list[Detail] = []
        self.custom: list[tuple[str, str]] = []


class RowBuilder:
    """Turns one record's fields into a ContactRow and its issues, following a RowPlan."""

    def __init__(self, plan: RowPlan, *, international: bool, max_value_chars: int) -> None:
        self.plan = plan
        self._international = international
        self._max_value = max_value_chars
        self._steps = [(c.index, self._step(c)) for c in plan.columns]
        self._key_column = (
            next(c.name for c in plan.columns if c.target.attribute is Attribute.CPF_CNPJ)
            if plan.field_count is not None
            else "cpf_cnpj"
        )

    def build(self, line: int, fields: Sequence[str]) -> tuple[ContactRow | None, list[RowIssue]]:
        """One record → (row or None when invalid, issues). Never raises on content."""
        expected = self.plan.field_count
        if expected is not None and len(fields) != expected:
            reason = Reason.TOO_MANY_FIELDS if len(fields) > expected else Reason.TOO_FEW_FIELDS
            detail = f"{len(fields)} fields, header has {expected}"
            return None, [RowIssue(line, None, reason, detail, Severity.INVALID)]
        state = _RowState(line)
        issues: list[RowIssue] = []
        for index, step in self._steps:
            if index >= len(fields):
                continue
            value = fields[index].strip()
            if value:
                issue = step(value, state)
                if issue is not None:
                    issues.append(issue)
        return self._finish(state, issues)

    def _finish(
        self, state: _RowState, issues: list[RowIssue]
    ) -> tuple[ContactRow | None, list[RowIssue]]:
        key = state.key
        if key is None:
            key = Reason.MISSING_CPF_CNPJ
            issues.insert(0, RowIssue(state.line, self._key_column, key, None, Severity.INVALID))
        if isinstance(key, Reason):
            return None, issues
        row = ContactRow(
            state.line,
            key,
            state.name,
            state.street_address,
            tuple(state.details),
            tuple(state.custom),
        )
        return row, issues

    def _step(self, column: Column) -> _Step:
        target = column.target
        if target.attribute is Attribute.CPF_CNPJ:
            return self._key_step(column.name)
        if target.attribute is not None:
            return self._text_step(column.name, target.attribute)
        if target.channel is Channel.EMAIL:
            return self._email_step(column.name)
        if target.channel in (Channel.PHONE, Channel.WHATSAPP):
            return self._phone_step(column.name, target.channel)
        if target.channel is Channel.JOURNEY:
            return self._journey_step(column.name)
        assert target.custom is not None
        return self._custom_step(column.name, target.custom)

    def _key_step(self, column: str) -> _Step:
        def step(value: str, state: _RowState) -> RowIssue | None:
            key = normalize_cpf_cnpj(value)
            state.key = key
            if isinstance(key, Reason):
                return RowIssue(state.line, column, key, value, Severity.INVALID)
            return None

        return step

    def _text_step(self, column: str, attribute: Attribute) -> _Step:
        limit = self._max_value
        is_name = attribute is Attribute.NAME

        def step(value: str, state: _RowState) -> RowIssue | None:
            if len(value) > limit:
                return _warning(state.line, column, Reason.VALUE_TOO_LONG, value)
            if is_name:
                state.name = value
            else:
                state.street_address = value
            return None

        return step

    def _email_step(self, column: str) -> _Step:
        def step(value: str, state: _RowState) -> RowIssue | None:
            email = normalize_email(value) if len(value) <= _MAX_CHANNEL_CHARS else None
            if email is None:
                return _warning(state.line, column, Reason.INVALID_EMAIL, value)
            state.details.append(Detail(Channel.EMAIL, email))
            return None

        return step

    def _phone_step(self, column: str, channel: Channel) -> _Step:
        international = self._international

        def step(value: str, state: _RowState) -> RowIssue | None:
            phone = normalize_phone(value, international=international)
            if phone is None:
                return _warning(state.line, column, Reason.INVALID_PHONE, value)
            state.details.append(Detail(channel, phone.e164, phone.country_code, phone.country))
            return None

        return step

    def _journey_step(self, column: str) -> _Step:
        def step(value: str, state: _RowState) -> RowIssue | None:
            if len(value) > _MAX_CHANNEL_CHARS:
                return _warning(state.line, column, Reason.VALUE_TOO_LONG, value)
            state.details.append(Detail(Channel.JOURNEY, value))
            return None

        return step

    def _custom_step(self, column: str, field_name: str) -> _Step:
        limit = self._max_value

        def step(value: str, state: _RowState) -> RowIssue | None:
            if len(value) > limit:
                return _warning(state.line, column, Reason.VALUE_TOO_LONG, value)
            state.custom.append((field_name, value))
            return None

        return step


_REPORT_VALUE_CHARS = 1024


def _warning(line: int, column: str, reason: Reason, value: str) -> RowIssue:
    return RowIssue(line, column, reason, value[:_REPORT_VALUE_CHARS], Severity.WARNING)


def record_issue(line: int, reason: Reason, raw: str) -> RowIssue:
    """The issue of a record the reader could not decode or parse."""
    return RowIssue(line, None, reason, raw[:_REPORT_VALUE_CHARS], Severity.INVALID)
