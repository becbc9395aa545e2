"""The duplicate-resolution report through the HTTP API: CSV (formula-safe) and JSONL, one row
per (key, field), nothing when the import said ``duplicates_report: false``, and another
tenant's import is a 404."""

from __future__ import annotations

import csv
import io
import itertools

import httpx
import orjson
import pytest

from tests.api.support import auth, csv_bytes, token, upload, wait_terminal
from tests.support import cpf

pytestmark = pytest.mark.api

HEADER = ("nome", "cpf", "plano")
FORMULA = '=HYPERLINK("http://evil.example","click")'


def content(key: str) -> bytes:
    return csv_bytes(
        HEADER,
        # the server's chunks are of 2 rows: lines 2 and 3 meet in one batch
        [("Ana", key, "gold"), (FORMULA, key, "@plat"), ("Bia", cpf(702), ""), ("", key, "")],
    )


async def test_the_report_csv_is_neutralized_and_jsonl_is_raw(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    key = cpf(701)
    created = (await upload(http, bearer, content(key))).json()
    job = await wait_terminal(http, bearer, created["id"])
    assert job["status"] in {"completed", "completed_with_placeholders"}
    path = f"/v1/imports/{created['id']}/duplicates"
    report = await http.get(path, headers=auth(bearer))
    assert report.status_code == 200
    assert report.headers["content-type"].startswith("text/csv")
    assert report.headers["content-disposition"].endswith('-duplicates.csv"')
    assert report.text.splitlines()[0] == "key,field,winner_value,winner_line,losing_lines,rule"
    rows = list(csv.DictReader(io.StringIO(report.text)))
    assert rows == [
        {
            "key": key,
            "field": "custom:plano",
            "winner_value": "'@plat",
            "winner_line": "3",
            "losing_lines": "2",
            "rule": "last_non_empty",
        },
        {
            "key": key,
            "field": "name",
            "winner_value": "'" + FORMULA,
            "winner_line": "3",
            "losing_lines": "2",
            "rule": "last_non_empty",
        },
    ]
    jsonl = await http.get(path, params={"format": "jsonl"}, headers=auth(bearer))
    assert jsonl.headers["content-type"].startswith("application/x-ndjson")
    documents = [orjson.loads(line) for line in jsonl.text.splitlines()]
    assert [d["winner_value"] for d in documents] == ["@plat", FORMULA]
    assert documents[1] == {
        "key": key,
        "field": "name",
        "winner_value": FORMULA,
        "winner_line": 3,
        "losing_lines": [2],
        "loser_stored": False,
        "rule": "last_non_empty",
    }
    bad_format = await http.get(path, params={"format": "xlsx"}, headers=auth(bearer))
    assert bad_format.status_code == 400


async def test_another_tenants_import_is_a_404_and_off_reports_nothing(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer, other = token(next(client_ids)), token(next(client_ids))
    created = (await upload(http, bearer, content(cpf(703)), duplicates_report="false")).json()
    await wait_terminal(http, bearer, created["id"])
    path = f"/v1/imports/{created['id']}/duplicates"
    hidden = await http.get(path, headers=auth(other))
    assert hidden.status_code == 404
    assert hidden.json()["error"] == "not_found"
    empty = await http.get(path, headers=auth(bearer))
    assert empty.text == "key,field,winner_value,winner_line,losing_lines,rule\n"
