"""docs/OPERATIONS.md lists every environment variable the README's table and settings.py know."""

from __future__ import annotations

import re
from pathlib import Path

from importer import failpoints

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
