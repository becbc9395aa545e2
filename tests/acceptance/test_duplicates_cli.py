"""``importer import --duplicates-out FILE`` (and ``job apply``) as a user runs it: the CSV holds
the duplicate-resolution report, formula-safe; ``--no-duplicates-report`` computes none."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from tests.acceptance.test_cli import importer
from tests.support import cpf

pytestmark = pytest.mark.acceptance

HEADER = "key,field,winner_value,winner_line,losing_lines,rule"


def repeats(path: Path) -> Path:
    key = cpf(31)
    path.write_text(
        f"nome,cpf,plano\nAna,{key},gold\n=1+1,{key},\nBia,{cpf(32)},\n,{key},plat\n",
        encoding="utf-8",
    )
    return path


def read_report(path: Path) -> list[dict[str, str]]:
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[0] == HEADER
    return list(csv.DictReader(io.StringIO(text)))


def test_duplicates_out_writes_the_report(db_dsn: str, tmp_path: Path) -> None:
    report = tmp_path / "dups.csv"
    path = repeats(tmp_path / "r.csv")
    done = importer(db_dsn, "import", str(path), "--client-id", "31", "--json",
                    "--duplicates-out", str(report))  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = read_report(report)
    assert {"key", "field", "winner_line", "rule"} <= set(rows[0])
    by_field = {r["field"]: r for r in rows}
    assert by_field["name"] == {
        "key": cpf(31),
        "field": "name",
        "winner_value": "'=1+1",
        "winner_line": "3",
        "losing_lines": "2",
        "rule": "last_non_empty",
    }
    assert (by_field["custom:plano"]["winner_line"], by_field["custom:plano"]["losing_lines"]) == (
        "5",
        "2",
    )
    off = tmp_path / "off.csv"
    again = importer(db_dsn, "import", str(path), "--client-id", "32", "--json",
                     "--no-duplicates-report", "--duplicates-out", str(off))  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert read_report(off) == []


def test_job_apply_writes_the_report_of_its_import(db_dsn: str, tmp_path: Path) -> None:
    path = repeats(tmp_path / "r.csv")
    preview = importer(db_dsn, "import", str(path), "--client-id", "33", "--json", "--dry-run")
    assert preview.returncode == 0, preview.stderr
    job_id = json.loads(preview.stdout)["job_id"]
    report = tmp_path / "dups.csv"
    applied = importer(db_dsn, "job", "apply", job_id, "--json", "--duplicates-out", str(report))
    assert applied.returncode == 0, applied.stderr
    assert {r["field"] for r in read_report(report)} == {"name", "custom:plano"}
