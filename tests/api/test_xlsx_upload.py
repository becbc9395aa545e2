"""An XLSX uploaded through the API: a worker imports it as the same rows as CSV; a password-
protected one fails the job ``unreadable_workbook``."""

from __future__ import annotations

import itertools
from pathlib import Path

import httpx
import pytest

from tests import xlsx_support as xs
from tests.api.conftest import Server
from tests.api.support import counters, csv_bytes, token, upload, wait_terminal
from tests.support import bad_cpf, cpf, db_state

pytestmark = pytest.mark.api

HEADER = ("nome", "cpf", "telefone")
ROWS = (
    ("Ana", cpf(301), "11987654321"),
    ("Bia", bad_cpf(302), ""),
    ("Ana Maria", cpf(301), "11912345678"),
    ("Duda", cpf(304), ""),
)


def workbook(path: Path) -> bytes:
    # CPFs and phones as numbers, as a user types them in Excel.
    sheet = [list(HEADER)] + [
        [name, int(key) if key == cpf(int(key[:9])) else key, int(phone) if phone else None]
        for name, key, phone in ROWS
    ]
    return xs.write_workbook(path, sheet).read_bytes()


async def test_an_uploaded_xlsx_imports_as_its_csv_does(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int], tmp_path: Path
) -> None:
    client, reference = next(client_ids), next(client_ids)
    content = workbook(tmp_path / "lista.xlsx")
    response = await upload(http, token(client), content, "lista.xlsx")
    assert response.status_code == 202, response.text
    assert response.json()["format"] == "xlsx"
    job = await wait_terminal(http, token(client), str(response.json()["id"]))
    response = await upload(http, token(reference), csv_bytes(HEADER, ROWS), "lista.csv")
    expected = await wait_terminal(http, token(reference), str(response.json()["id"]))
    assert (job["status"], counters(job)) == (expected["status"], counters(expected))
    assert counters(job)["invalid"] == 1
    assert job["progress"]["percent"] == 100.0  # type: ignore[index]
    assert await db_state(server.dsn, client) == await db_state(server.dsn, reference)


async def test_a_password_protected_upload_fails_unreadable_workbook(
    http: httpx.AsyncClient, client_ids: itertools.count[int], tmp_path: Path
) -> None:
    client = next(client_ids)
    workbook(tmp_path / "plain.xlsx")
    locked = xs.encrypted_workbook(tmp_path / "locked.xlsx", tmp_path / "plain.xlsx")
    response = await upload(http, token(client), locked.read_bytes(), "locked.xlsx")
    assert response.status_code == 202, response.text
    job = await wait_terminal(http, token(client), str(response.json()["id"]))
    assert (job["status"], job["fail_reason"]) == ("failed", "unreadable_workbook")
