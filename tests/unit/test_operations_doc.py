"""The documents stay true: docs/OPERATIONS.md's configuration table (the source, moved there from
the README) lists every variable settings.py reads, the README links only to documents that exist,
and no shipped document calls a variable the code reads unused."""

from __future__ import annotations

import re
from pathlib import Path

from importer.core import failpoints

ROOT = Path(__file__).resolve().parents[2]
_TABLE_VARIABLE = re.compile(r"^\| `([A-Z][A-Z0-9_]+)`", re.MULTILINE)
_READ_VARIABLE = re.compile(r"\"([A-Z][A-Z0-9_]{2,})\"")
_LINK = re.compile(r"\]\(((?:docs/|benchmarks/|CHANGELOG)[^)#]*)(?:#[^)]*)?\)")
DOCUMENTS = ("README.md", "docs/API.md", "docs/ARCHITECTURE.md", "docs/GLOSSARY.md")


def configuration_section() -> str:
    text = (ROOT / "docs" / "OPERATIONS.md").read_text(encoding="utf-8")
    return text.split("## Configuration", 1)[1].split("\n## ", 1)[0]


def configuration_table() -> set[str]:
    """The variables the rows of docs/OPERATIONS.md's configuration table start with."""
    return set(_TABLE_VARIABLE.findall(configuration_section()))


def test_the_operations_guide_holds_the_configuration_table() -> None:
    table = configuration_table()
    assert table, "the configuration table moved"
    assert {"DATABASE_URL", "RABBITMQ_URL", "REDIS_URL", "JWT_SECRET"} <= table


def test_every_variable_settings_reads_is_in_the_configuration_table() -> None:
    source = (ROOT / "importer" / "settings.py").read_text(encoding="utf-8")
    read = set(_READ_VARIABLE.findall(source)) | {failpoints.ENV_VAR}
    assert "DATABASE_URL" in read
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", configuration_section()))
    assert read <= documented, read - documented


def test_the_readme_links_to_documents_that_exist() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = set(_LINK.findall(readme))
    assert {"docs/API.md", "docs/ARCHITECTURE.md", "docs/OPERATIONS.md"} <= linked
    assert {"docs/RELIABILITY.md", "docs/GLOSSARY.md"} <= linked
    for path in linked:
        assert (ROOT / path).is_file(), path


_STALE = re.compile(r"not (?:used|read)[^.]{0,40}\byet\b|does not\s+(?:#\s*)?read\b[^.]*_URL", re.I)


def test_no_document_calls_a_variable_settings_reads_unused() -> None:
    """docker-compose.yml and the README once said RABBITMQ_URL / REDIS_URL were not read yet,
    long after they were: no shipped document may call a service the code uses unused."""
    shipped = ("docker-compose.yml", "Dockerfile", "docs/OPERATIONS.md", *DOCUMENTS)
    for path in shipped:
        text = (ROOT / path).read_text(encoding="utf-8")
        assert not _STALE.search(text), (path, _STALE.search(text))
