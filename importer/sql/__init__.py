"""SQL of the importer: ``schema.sql`` and the named blocks of ``queries/*.sql``, loaded once.

The blocks are split by concern (``queries/jobs.sql``, ``queries/batches.sql``, …) into one
name → SQL mapping: a name is defined in one file only, and a second definition (in the same
file or another) is refused when the files load, naming both places.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from importlib import resources
from importlib.resources.abc import Traversable

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


class DuplicateQueryError(ValueError):
    """A query name defined twice: the mapping would silently keep only one of them."""


def parse_queries(text: str, source: str = "<text>") -> dict[str, str]:
    """Split ``-- name: x`` blocks into a name → SQL mapping (``source``: the text, for errors)."""
    parts = _NAME.split(text)
    parsed: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in parsed:
            raise DuplicateQueryError(f"query {name!r} is defined twice in {source}")
        parsed[name] = body.strip()
    return parsed


def merge_queries(texts: Iterable[tuple[str, str]]) -> dict[str, str]:
    """One mapping from several ``(source, text)`` files; a name defined in two is refused."""
    merged: dict[str, str] = {}
    defined_in: dict[str, str] = {}
    for source, text in texts:
        for name, sql in parse_queries(text, source).items():
            if name in defined_in:
                raise DuplicateQueryError(
                    f"query {name!r} is defined in both {defined_in[name]} and {source}"
                )
            defined_in[name] = source
            merged[name] = sql
    return merged


def load_queries(folder: Traversable) -> dict[str, str]:
    """Every ``*.sql`` of ``folder`` (in name order) merged into one mapping."""
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return merge_queries((f"{folder.name}/{f.name}", f.read_text("utf-8")) for f in files)


@functools.cache
def queries() -> dict[str, str]:
    return load_queries(resources.files(__package__).joinpath("queries"))


@functools.cache
def schema() -> str:
    return resources.files(__package__).joinpath("schema.sql").read_text("utf-8")
