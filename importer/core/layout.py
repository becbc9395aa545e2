"""Header mapping and layouts → a row plan: which column feeds which target.

Pure: no I/O.
"""

from __future__ import annotations

import codecs
import difflib
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from importer.core.errors import FileRejectedError, LayoutError
from importer.core.keys import DedupeKey, parse_key
from importer.core.models import Attribute, Channel, Reason
from importer.core.policy import DEFAULT_POLICY, ChannelRule, MergePolicy, parse_policy
from importer.core.report import SOURCE_ERROR_COLUMN


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
    merge: MergePolicy = DEFAULT_POLICY  # per-field merge rules (core.policy)
    key: DedupeKey = DedupeKey.CPF_CNPJ  # what rows are matched by (core.keys)


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
LAYOUT_KEYS = ("columns", "delimiter", "encoding", "header", "unmapped", "sheet", "merge", "key")


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
    merge = parse_policy(document.get("merge"))
    key = parse_key(document.get("key"))
    if key.channel is not None and merge.channels is ChannelRule.REPLACE:
        raise LayoutError(
            f"layout.merge.channels 'replace' cannot go with layout.key {key.value!r}: it would"
            " drop the values contacts are found by",
            "layout.merge.channels",
        )
    return Layout(
        parsed,
        delimiter,
        _layout_encoding(document),
        has_header,
        unmapped == "custom",
        _sheet(document.get("sheet")),
        merge,
        key,
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
    key_channel: Channel | None = None  # the layout's dedupe key channel (None: the CPF/CNPJ)

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
    return _checked_plan(columns, len(names), _key_channel(layout))


def plan_for_positions(field_count: int, layout: Layout) -> RowPlan:
    """Map a header-less CSV by the layout's positions."""
    columns = [
        Column(c.source, f"column_{c.source + 1}", c.target)
        for c in layout.columns
        if isinstance(c.source, int) and c.target is not None
    ]
    if any(c.index >= field_count for c in columns):
        raise FileRejectedError(Reason.INVALID_LAYOUT, "a layout position is past the last column")
    return _checked_plan(columns, field_count, layout.key.channel)


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
    channel = _key_channel(layout)
    if channel is not None:
        _check_key_columns(columns, channel, required=False)
    return RowPlan(tuple(columns), None, channel)


def column_targets(names: Sequence[str], layout: Layout | None) -> list[Target | None]:
    """What an import does with each named column as things stand (None: ignored): the
    layout's columns, the others by their aliases — the columns step shows it (core.columns)."""
    explicit = _explicit_targets(names, layout)
    unmapped_as_custom = layout is None or layout.unmapped_as_custom
    return [
        explicit[i] if i in explicit else _implicit_target(name, unmapped_as_custom)
        for i, name in enumerate(names)
    ]


def _key_channel(layout: Layout | None) -> Channel | None:
    return None if layout is None else layout.key.channel


def _implicit_target(name: str, unmapped_as_custom: bool) -> Target | None:
    """A column the layout does not name: its alias, else a custom field (unless ignored). The
    ``importer_error`` column of a source-format error report is never a field: a fixed report
    imports as the file it came from."""
    if not name.strip() or name.strip() == SOURCE_ERROR_COLUMN:
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


def _checked_plan(columns: list[Column], field_count: int, key: Channel | None) -> RowPlan:
    _reject_duplicate_attributes(columns)
    if key is not None:
        _check_key_columns(columns, key, required=True)
    elif not any(c.target.attribute is Attribute.CPF_CNPJ for c in columns):
        raise FileRejectedError(Reason.MISSING_REQUIRED_COLUMN, "no cpf_cnpj column")
    return RowPlan(tuple(columns), field_count, key)


def _check_key_columns(columns: Sequence[Column], key: Channel, *, required: bool) -> None:
    """Under a channel key (core.keys): exactly one column of it (at most one in a JSONL
    object, whose rows without it are ``missing_key``), and no CPF/CNPJ column."""
    word = DedupeKey.of(key).value
    for column in columns:
        if column.target.attribute is Attribute.CPF_CNPJ:
            raise FileRejectedError(
                Reason.INVALID_LAYOUT,
                f"column {column.name!r} maps to cpf_cnpj, which an import keyed by {word}"
                " cannot take: map it to 'ignore'",
            )
    keyed = [c.name for c in columns if c.target.channel is key]
    if len(keyed) > 1:
        names = ", ".join(repr(n) for n in keyed)
        raise FileRejectedError(
            Reason.INVALID_LAYOUT,
            f"columns {names} all map to {word}, the key: map one of them, the others to 'ignore'",
        )
    if required and not keyed:
        raise FileRejectedError(Reason.MISSING_REQUIRED_COLUMN, f"no {word} column (the key)")
