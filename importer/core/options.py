"""What a request to create an import may say, checked: pure functions, no I/O.

One validator for every content type: form fields arrive as strings (``"true"``, ``"3"``), JSON
bodies as natives, and both give the same :class:`ImportOptions` — or every problem at once, as
(field, message) pairs for the API's 400 list. Also here: the object key a file is stored under,
and the check that a client-given key stays inside its tenant.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import orjson

from importer.core.errors import InvalidRequestError, LayoutError
from importer.core.layout import parse_layout
from importer.core.models import ConflictStrategy, InputFormat
from importer.core.objects import key_problem
from importer.core.threshold import parse_max_invalid
from importer.core.webhooks import parse_notify_url

# A stored file name keeps at most this many UTF-8 bytes (S3 keys stop at 1024 in all).
MAX_FILENAME_BYTES = 200
# Tags: a short label list, stored as JSON on the job.
MAX_TAGS = 50
MAX_TAG_CHARS = 64
MAX_PURPOSE_CHARS = 1000
MAX_LAYOUT_NAME_CHARS = 200
# PostgreSQL ``integer`` and ``bigint`` bounds of the columns these options land in.
MAX_INT4 = 2**31 - 1
MAX_INT8 = 2**63 - 1
# Kinds of firing intents (seed 003 §10).
INTENT_KINDS = ("hsm", "sms", "email")
# A client's JSON document (a layout, an intent's params) is stored as jsonb and written back by
# orjson, which stops at 254 levels of nesting; a layout needs a handful.
MAX_JSON_DEPTH = 32
# PostgreSQL's text and jsonb cannot hold U+0000: refused here, not by the database as a 503.
NUL_MESSAGE = "must not contain NUL characters"

_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._\-]+")
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


@dataclass(frozen=True, slots=True)
class FiringIntent:
    """A message firing that waits for its import (seed 003 §10)."""

    kind: str
    params: dict[str, object]


@dataclass(frozen=True, slots=True)
class ImportOptions:
    """The validated options of a new import, whatever the request's content type."""

    conflict_strategy: ConflictStrategy
    has_sensitive_data: bool
    has_underage_data: bool
    data_processing_purpose: str
    lgpd_processing_hypothesis: int
    input_format: InputFormat | None = None
    has_internationalization: bool = False
    journey_id: int | None = None
    auto_start_journey_mailing: bool | None = None
    tags: tuple[str, ...] = ()
    layout: dict[str, object] | None = None
    layout_id: int | None = None
    preview: bool = False  # plan and rest in ``ready`` until an apply
    max_invalid: str | None = None  # the error threshold, canonical (core.threshold)
    notify_url: str | None = None  # the completion webhook's target (core.webhooks)
    duplicates_report: bool = True  # compute and keep the duplicate report (core.duplicates)


@dataclass(frozen=True, slots=True)
class SealedFile:
    """A file the client announces (presigned upload) or points at (existing key)."""

    size: int
    sha256: str


# The option fields every create request accepts (multipart form, JSON body).
OPTION_FIELDS = (
    "conflict_strategy",
    "has_sensitive_data",
    "has_underage_data",
    "data_processing_purpose",
    "lgpd_processing_hypothesis",
    "has_internationalization",
    "journey_id",
    "auto_start_journey_mailing",
    "tags",
    "layout",
    "layout_id",
    "format",
    "preview",
    "max_invalid",
    "notify_url",
    "duplicates_report",
)
REQUIRED_OPTIONS = (
    "conflict_strategy",
    "has_sensitive_data",
    "has_underage_data",
    "data_processing_purpose",
    "lgpd_processing_hypothesis",
)


class Problems:
    """Collects every field problem of a request, so the client fixes them all at once."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, field: str, message: str) -> None:
        self.items.append((field, message))

    def raise_any(self) -> None:
        if self.items:
            raise InvalidRequestError(self.items)


def check_fields(raw: Mapping[str, object], allowed: Sequence[str], problems: Problems) -> None:
    """Unknown fields are refused: a misspelt option must not be silently ignored."""
    for name in raw:
        if name not in allowed:
            problems.add(name, "unknown field")


def parse_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError("must be true or false")


def parse_int(value: object, low: int, high: int) -> int:
    number: int
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\s*-?\d{1,19}\s*", value):
        number = int(value)
    else:
        raise ValueError("must be an integer")
    if not low <= number <= high:
        raise ValueError(f"must be between {low} and {high}")
    return number


def parse_text(value: object, max_chars: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    if len(value) > max_chars:
        raise ValueError(f"must be at most {max_chars} characters")
    if "\x00" in value:
        raise ValueError(NUL_MESSAGE)
    return value.strip()


def json_value_problem(value: object) -> str | None:
    """Why a client's JSON value cannot be stored and shown back (a NUL in a string or a key,
    nesting past ``MAX_JSON_DEPTH``), or None. Iterative: a deep value costs no recursion."""
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str) and "\x00" in item:
            return NUL_MESSAGE
        if isinstance(item, dict | list):
            if depth >= MAX_JSON_DEPTH:
                return f"must not nest more than {MAX_JSON_DEPTH} levels deep"
            children = [*item, *item.values()] if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
    return None


def parse_tags(value: object) -> tuple[str, ...]:
    """A JSON list of strings, or a comma-separated list (a form field); order kept, no repeats."""
    items: object = value
    if isinstance(value, str):
        text = value.strip()
        items = orjson.loads(text) if text.startswith("[") else text.split(",")
    if not isinstance(items, list) or not all(isinstance(t, str) for t in items):
        raise ValueError("must be a list of strings or a comma-separated list")
    if any("\x00" in t for t in items):
        raise ValueError(NUL_MESSAGE)
    tags = tuple(dict.fromkeys(t.strip() for t in items if t.strip()))
    if len(tags) > MAX_TAGS:
        raise ValueError(f"at most {MAX_TAGS} tags")
    if any(len(t) > MAX_TAG_CHARS for t in tags):
        raise ValueError(f"a tag has at most {MAX_TAG_CHARS} characters")
    return tags


def parse_layout_document(value: object) -> dict[str, object]:
    """A layout as the CLI's ``--layout`` file holds it: a JSON object (or its text)."""
    document = orjson.loads(value) if isinstance(value, str | bytes) else value
    if not isinstance(document, dict):
        raise TypeError("must be a JSON object")
    problem = json_value_problem(document)
    if problem is not None:
        raise ValueError(problem)
    parse_layout(document)  # a LayoutError names the part at fault (``layout.delimeter``)
    return document


def _add_layout_problem(problems: Problems, exc: LayoutError, field: str) -> None:
    """A layout problem under the request's own field name: ``document.colums`` for a layout
    resource, ``layout.colums`` for an import's inline layout."""
    path = exc.field.removeprefix("layout")
    problems.add(field + path, str(exc))


def parse_format(value: object) -> InputFormat:
    if not isinstance(value, str) or value.strip().lower() not in {f.value for f in InputFormat}:
        raise ValueError("must be csv, jsonl or xlsx")
    return InputFormat(value.strip().lower())


def parse_strategy(value: object) -> ConflictStrategy:
    try:
        return ConflictStrategy.parse(str(value))
    except ValueError:
        raise ValueError("must be merge, discard or ignore") from None


_PARSERS: dict[str, Callable[[object], object]] = {
    "conflict_strategy": parse_strategy,
    "has_sensitive_data": parse_bool,
    "has_underage_data": parse_bool,
    "data_processing_purpose": lambda v: parse_text(v, MAX_PURPOSE_CHARS),
    "lgpd_processing_hypothesis": lambda v: parse_int(v, 1, MAX_INT4),
    "has_internationalization": parse_bool,
    "journey_id": lambda v: parse_int(v, 1, MAX_INT8),
    "auto_start_journey_mailing": parse_bool,
    "tags": parse_tags,
    "layout": parse_layout_document,
    "layout_id": lambda v: parse_int(v, 1, MAX_INT8),
    "format": parse_format,
    "preview": parse_bool,
    "max_invalid": lambda v: str(parse_max_invalid(v)),
    "notify_url": parse_notify_url,
    "duplicates_report": parse_bool,
}


def parse_options(raw: Mapping[str, object], problems: Problems) -> ImportOptions | None:
    """Validate the options of a create request; None (with ``problems`` filled) when invalid.

    Values may be JSON natives or form strings (``"true"``, ``"3"``); an empty form value counts
    as absent. Rules across fields: ``auto_start_journey_mailing`` is required with
    ``journey_id``; ``layout`` and ``layout_id`` exclude each other.
    """
    values: dict[str, object] = {}
    for name, parse in _PARSERS.items():
        value = raw.get(name)
        if value is None or value == "":
            if name in REQUIRED_OPTIONS:
                problems.add(name, "is required")
            continue
        try:
            values[name] = parse(value)
        except LayoutError as exc:
            _add_layout_problem(problems, exc, name)
        except (ValueError, TypeError) as exc:
            problems.add(name, str(exc) or "is invalid")
    if "journey_id" in values and "auto_start_journey_mailing" not in values:
        problems.add("auto_start_journey_mailing", "is required when journey_id is given")
    if "layout" in values and "layout_id" in values:
        problems.add("layout_id", "give layout or layout_id, not both")
    if problems.items:
        return None
    return _options(values)


def _options(values: Mapping[str, object]) -> ImportOptions:
    """Typed options from already-validated values (each parser returned the right type)."""
    journey = values.get("journey_id")
    auto_start = values.get("auto_start_journey_mailing")
    layout = values.get("layout")
    layout_id = values.get("layout_id")
    input_format = values.get("format")
    tags = values.get("tags", ())
    assert isinstance(tags, tuple)
    return ImportOptions(
        conflict_strategy=ConflictStrategy(str(values["conflict_strategy"])),
        has_sensitive_data=values["has_sensitive_data"] is True,
        has_underage_data=values["has_underage_data"] is True,
        data_processing_purpose=str(values["data_processing_purpose"]),
        lgpd_processing_hypothesis=_as_int(values["lgpd_processing_hypothesis"]),
        input_format=input_format if isinstance(input_format, InputFormat) else None,
        has_internationalization=values.get("has_internationalization") is True,
        journey_id=_as_int(journey) if journey is not None else None,
        auto_start_journey_mailing=auto_start if isinstance(auto_start, bool) else None,
        tags=tuple(str(t) for t in tags),
        layout=layout if isinstance(layout, dict) else None,
        layout_id=_as_int(layout_id) if layout_id is not None else None,
        preview=values.get("preview") is True,
        max_invalid=str(values["max_invalid"]) if "max_invalid" in values else None,
        notify_url=str(values["notify_url"]) if "notify_url" in values else None,
        duplicates_report=values.get("duplicates_report") is not False,
    )


def _as_int(value: object) -> int:
    assert isinstance(value, int)
    return value


def parse_sealed(raw: Mapping[str, object], problems: Problems, max_bytes: int) -> SealedFile:
    """``size`` and ``sha256`` of an announced file (problems recorded, not raised)."""
    size = 0
    if raw.get("size") is None:
        problems.add("size", "is required")
    else:
        try:
            size = parse_int(raw.get("size"), 1, max_bytes)
        except ValueError as exc:
            problems.add("size", str(exc))
    sha256 = raw.get("sha256")
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        problems.add("sha256", "must be 64 hexadecimal characters")
        sha256 = ""
    return SealedFile(size, sha256.lower())


def parse_intent(value: object) -> FiringIntent:
    """The HSM route's ``intent`` field: ``{"kind": "hsm"|"sms"|"email", "params": {...}}``."""
    document = orjson.loads(value) if isinstance(value, str | bytes) else value
    if not isinstance(document, dict):
        raise TypeError("must be a JSON object")
    kind = document.get("kind")
    if kind not in INTENT_KINDS:
        raise ValueError("kind must be hsm, sms or email")
    params = document.get("params", {})
    if not isinstance(params, dict):
        raise TypeError("params must be a JSON object")
    problem = json_value_problem(params)
    if problem is not None:
        raise ValueError(f"params {problem}")
    if set(document) - {"kind", "params"}:
        raise ValueError("only kind and params are accepted")
    return FiringIntent(str(kind), params)


def parse_layout_body(raw: Mapping[str, object]) -> tuple[str, dict[str, object]]:
    """A layout resource: ``{"name": ..., "document": {...}}``."""
    problems = Problems()
    check_fields(raw, ("name", "document"), problems)
    name = document = None
    try:
        name = parse_text(raw.get("name"), MAX_LAYOUT_NAME_CHARS)
    except ValueError as exc:
        problems.add("name", str(exc))
    try:
        document = parse_layout_document(raw.get("document"))
    except LayoutError as exc:
        _add_layout_problem(problems, exc, "document")
    except (ValueError, TypeError) as exc:
        problems.add("document", str(exc))
    problems.raise_any()
    assert name is not None
    assert document is not None
    return name, document


# --- file names and keys ---------------------------------------------------------------------


def display_filename(name: str) -> str:
    """The client's file name as shown back: its last path segment, no control characters."""
    base = re.split(r"[/\\]", name)[-1]
    shown = "".join(ch for ch in base if unicodedata.category(ch)[0] != "C").strip()
    return shown[:255] or "upload"


def sanitize_filename(name: str) -> str:
    """A file name safe as an object key's last segment: letters, digits, ``. _ -`` only.

    Accents are folded (``endereço.csv`` → ``endereco.csv``), anything else becomes ``_``, leading
    dots go (no ``.``/``..`` segment, no hidden file), and the name is cut to
    ``MAX_FILENAME_BYTES`` keeping its extension (``.csv.gz`` tells the pipeline to inflate).
    """
    decomposed = unicodedata.normalize("NFKD", display_filename(name))
    folded = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    safe = _UNSAFE_NAME_CHARS.sub("_", folded).lstrip(".")
    if not safe.strip("_"):
        safe = "upload"
    if len(safe) > MAX_FILENAME_BYTES:
        stem, dot, ext = safe.partition(".")
        tail = (dot + ext)[-40:]
        safe = stem[: MAX_FILENAME_BYTES - len(tail)] + tail
    return safe


def object_key(client_id: int, job_id: uuid.UUID, filename: str) -> str:
    """Where an upload lives: ``<client_id>/<job_id>/<sanitized name>``."""
    return f"{client_id}/{job_id}/{sanitize_filename(filename)}"


def tenant_key_problem(client_id: int, key: object) -> str | None:
    """Why a client-given key is refused: not a safe key, or outside the tenant's prefix."""
    if not isinstance(key, str):
        return "must be a string"
    if not key.startswith(f"{client_id}/"):
        return f"must start with '{client_id}/' (your tenant's prefix)"
    problem = key_problem(key)
    return f"is not a valid object key: it {problem}" if problem else None
