"""`importer import contacts.xlsx`: the same counters, error report and database as the same data
as CSV; and the workbooks that fail the job (corrupt, password-protected, a zip bomb)."""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import io
import os
from pathlib import Path

import pytest

from tests import xlsx_support as xs
from tests.acceptance.test_cli import import_json
from tests.support import bad_cpf, cpf, db_state

pytestmark = pytest.mark.acceptance

HEADER = ["nome", "cpf", "telefone", "email", "nascimento", "plano", "ativo"]


def contacts(count: int) -> list[list[object] | None]:
    """Rows as a spreadsheet holds them (numbers, dates, booleans); None: an empty row."""
    rows: list[list[object] | None] = []
    for n in range(count):
        key: object = int(cpf(100_000_000 + n % 250))  # repeated keys: merges
        if n % 17 == 0:
            key = bad_cpf(200_000_000 + n)  # invalid_cpf, reported with its value
        elif n % 29 == 0:
            key = None  # missing_cpf_cnpj
        elif n % 3 == 0:
            key = float(cpf(100_000_000 + n % 250))  # saved as 5.29...E+10 by some tools
        phone: object = 11_900_000_000 + n if n % 11 else "123"  # a bad phone: a warning
        row: list[object] = [
            f"Contato {n}",
            key,
            phone,
            f"c{n}@example.com" if n % 13 else "not-an-email",
            dt.date(1960, 1, 1) + dt.timedelta(days=n * 37),
            ["ouro", "prata", None][n % 3],
            n % 2 == 0,
        ]
        if n % 23 == 0:
            row.append("extra")  # too_many_fields
        if n % 19 == 0:
            row = row[:2]  # trailing cells left empty: a short row in the sheet, empty fields
        rows.append(row)
        if n % 31 == 0:
            rows.append(None)
    return rows


def csv_text(rows: list[list[object] | None]) -> str:
    """The same data as a CSV, each cell as a user sees it in the sheet."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    for row in rows:
        if row is None:
            out.write("\n")
            continue
        cells = [*row, *[None] * (len(HEADER) - len(row))]
        writer.writerow([_as_seen(value) for value in cells])
    return out.getvalue()


def _as_seen(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return str(int(value))
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def report(path: Path) -> list[tuple[str, ...]]:
    rows = csv.DictReader(io.StringIO(path.read_text(encoding="utf-8")))
    return sorted((r["line"], r["column"], r["reason"], r["value"], r["severity"]) for r in rows)


def test_an_xlsx_imports_as_the_same_data_as_csv(db_dsn: str, tmp_path: Path) -> None:
    rows = contacts(600)
    sheet = [HEADER, *[row if row is not None else [] for row in rows]]
    workbook = xs.write_workbook(tmp_path / "contacts.xlsx", sheet, sheet="Contatos")
    text = tmp_path / "contacts.csv"
    text.write_text(csv_text(rows), encoding="utf-8")
    xlsx_report, csv_report = tmp_path / "xlsx-errors.csv", tmp_path / "csv-errors.csv"

    code, from_xlsx = import_json(
        db_dsn,
        workbook,
        "--client-id",
        "501",
        "--errors-out",
        str(xlsx_report),
        "--chunk-size",
        "50",
    )
    assert code == 0, from_xlsx
    code, from_csv = import_json(
        db_dsn, text, "--client-id", "502", "--errors-out", str(csv_report)
    )
    assert code == 0, from_csv

    counters = ("status", "rows_read", "inserted", "updated", "invalid", "error", "ignored")
    assert {k: from_xlsx[k] for k in counters} == {k: from_csv[k] for k in counters}
    assert from_xlsx["invalid"] > 0
    assert from_xlsx["updated"] > 0
    reported = report(xlsx_report)
    assert reported == report(csv_report)
    assert {r[2] for r in reported} >= {
        "invalid_cpf", "missing_cpf_cnpj", "too_many_fields", "invalid_phone", "invalid_email"
    }  # fmt: skip
    stored = asyncio.run(db_state(db_dsn, 501))
    assert stored
    assert stored == asyncio.run(db_state(db_dsn, 502))


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("noise", "unreadable_workbook"),
        ("truncated", "unreadable_workbook"),
        ("password", "unreadable_workbook"),
        ("bomb", "decompressed_too_large"),
    ],
)
def test_a_workbook_that_cannot_be_read_fails_the_job(
    db_dsn: str, tmp_path: Path, kind: str, reason: str
) -> None:
    plain = xs.write_workbook(tmp_path / "plain.xlsx", [HEADER, ["Ana", int(cpf(1))]])
    path = tmp_path / f"{kind}.xlsx"
    if kind == "noise":
        path.write_bytes(os.urandom(20_000))
    elif kind == "truncated":
        path.write_bytes(plain.read_bytes()[:-200])
    elif kind == "password":
        xs.encrypted_workbook(path, plain)
    else:
        xs.bomb_workbook(path, rows=1_000_000)
    code, document = import_json(db_dsn, path, "--client-id", "503")
    assert code == 1
    assert (document["status"], document["fail_reason"]) == ("failed", reason)
    assert document["rows_read"] == 0
    assert document["elapsed_s"] < 10
