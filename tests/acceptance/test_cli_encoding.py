"""Issue 11 through the command line: a damaged UTF-8 file, a UTF-8 file read as cp1252 (the
``suspect_encoding`` warning in --json, the table and --errors-out) and a 4 GiB gzip bomb."""

from __future__ import annotations

import asyncio
import csv
import gzip
import io
import json
import time
from pathlib import Path

import pytest

from tests.acceptance.test_cli import import_json, importer
from tests.support import cpf, fetch

pytestmark = pytest.mark.acceptance


def test_damaged_utf8_imports_its_good_names_exactly(db_dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "damaged.csv"
    good = {cpf(600): "Conceição", cpf(601): "😀 Zé", cpf(602): "Ñandú"}
    bad = [b"Jo\xe3o", b"Concei\xc3", b"\xc0\xaf", b"\xff", b"Ana \xe9"]
    lines = [b"nome,cpf"] + [f"{n},{k}".encode() for k, n in good.items()]
    lines += [name + b"," + cpf(610 + i).encode() for i, name in enumerate(bad)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    report = tmp_path / "errors.csv"
    code, doc = import_json(db_dsn, path, "--client-id", "41", "--errors-out", str(report))
    assert code == 0
    assert (doc["inserted"], doc["invalid"]) == (3, 5)
    assert "warnings" not in doc
    rows = stored_names(db_dsn, 41)
    assert rows == good
    reasons = [r["reason"] for r in csv.DictReader(io.StringIO(report.read_text()))]
    assert reasons == ["invalid_encoding"] * 5


def stored_names(dsn: str, client_id: int) -> dict[str, str]:
    found = asyncio.run(
        fetch(dsn, "SELECT cpf_cnpj, name FROM contact WHERE client_id = $1", client_id)
    )
    return {r["cpf_cnpj"]: r["name"] for r in found}


def test_utf8_read_as_cp1252_warns_in_the_summary_and_the_report(
    db_dsn: str, tmp_path: Path
) -> None:
    path = tmp_path / "mislabelled.csv"
    path.write_bytes(f"nome,cpf\nConceição,{cpf(620)}\n".encode())
    layout = tmp_path / "layout.json"
    layout.write_text(json.dumps({"encoding": "cp1252"}))
    report = tmp_path / "errors.csv"
    args = ("--client-id", "42", "--layout", str(layout), "--errors-out", str(report))
    code, doc = import_json(db_dsn, path, *args)
    assert code == 0
    (warning,) = doc["warnings"]  # type: ignore[misc]
    assert warning["code"] == "suspect_encoding"
    first = next(csv.DictReader(io.StringIO(report.read_text())))
    assert (first["line"], first["reason"], first["severity"]) == (
        "0",
        "suspect_encoding",
        "warning",
    )
    table = importer(db_dsn, "import", str(path), "--client-id", "43", "--layout", str(layout))
    assert "warning: suspect_encoding" in table.stdout


def test_a_gzip_bomb_fails_fast(db_dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "bomb.csv.gz"
    member = gzip.compress(bytes(1024 * 1024), compresslevel=9)  # 1 MiB of zeros in ~1 KB
    # 4 GiB in ~4 MB, as concatenated members (gzip reads them as one stream): made at once
    path.write_bytes(gzip.compress(b"nome,cpf\n") + member * 4096)
    started = time.monotonic()
    code, doc = import_json(db_dsn, path, "--client-id", "44")
    assert code == 1
    assert doc["fail_reason"] == "decompressed_too_large"
    assert time.monotonic() - started < 20  # start-up included; the bomb itself: milliseconds
