"""docs/OPERATIONS.md lists every environment variable the README's table and settings.py know."""

from __future__ import annotations

import re
from pathlib import Path

from importer.core import failpoints

ROOT = Path(__file__).resolve().parents[2]
_TABLE_VARIABLE = re.compile(r"^\| `([A-Z][A-Z0-9_]+)`", re.MULTILINE)
_READ_VARIABLE = re.compile(r"\"([A-Z][A-Z0-9_]{2,})\"")


def documented() -> set[str]:
    text = (ROOT / "docs" / "OPERATIONS.md").read_text(encoding="utf-8")
    return set(re.findall(r"`([A-Z][A-Z0-9_]+)`", text))


def test_every_readme_variable_is_in_the_operations_guide() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    in_readme = set(_TABLE_VARIABLE.findall(section))
    assert in_readme, "the README's configuration table moved"
    assert in_readme <= documented()


def test_every_variable_settings_reads_is_in_the_operations_guide() -> None:
    source = (ROOT / "importer" / "settings.py").read_text(encoding="utf-8")
    read = set(_READ_VARIABLE.findall(source)) | {failpoints.ENV_VAR}
    assert "DATABASE_URL" in read
    assert read <= documented()


_STALE = re.compile(r"not (?:used|read)[^.]{0,40}\byet\b|does not\s+(?:#\s*)?read\b[^.]*_URL", re.I)


def test_no_document_calls_a_variable_settings_reads_unused() -> None:
    """docker-compose.yml and the README once said RABBITMQ_URL / REDIS_URL were not read yet,
    long after they were: no shipped document may call a service the code uses unused."""
    for path in ("docker-compose.yml", "README.md", "docs/OPERATIONS.md", "Dockerfile"):
        text = (ROOT / path).read_text(encoding="utf-8")
        assert not _STALE.search(text), (path, _STALE.search(text))
