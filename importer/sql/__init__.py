"""SQL of the importer: ``schema.sql`` and the named blocks of ``queries.sql``, loaded once."""

from __future__ import annotations

import functools
import re
from importlib import resources

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """Split ``-- name: x`` blocks into a name → SQL mapping."""
    parts = _NAME.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


@functools.cache
def queries() -> dict[str, str]:
    return parse_queries(resources.files(__package__).joinpath("queries.sql").read_text("utf-8"))


@functools.cache
def schema() -> str:
    return resources.files(__package__).joinpath("schema.sql").read_text("utf-8")
