"""Preview, then apply, and the error threshold, through the HTTP API and its workers.

A preview rests in ``ready`` with its document and writes nothing (the contact tables are
byte-identical, checksum); its apply imports with the counters it showed, and says when they
differ (someone wrote in between); a file past ``max_invalid`` fails before any contact write.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import Server
from tests.api.support import (
    TERMINAL,
    auth,
    counters,
    csv_bytes,
    token,
    upload,
    wait_terminal,
    wait_until,
)
from tests.support import bad_cpf, cpf, fetch, import_file, tables_checksum

pytestmark = pytest.mark.api

HEADER = ("nome", "cpf", "email", "plano")
ROWS = (
    ("Ana", cpf(301), "ana@example.com", "Ouro"),
    ("Bia", cpf(302), "", "Prata"),
    ("Ana Maria", cpf(301), "ana2@example.com", ""),
    ("Caio", bad_cpf(303), "caio@example.com", ""),
    ("<img src=x onerror=alert(1)>", cpf(304), "", "=HYPERLINK(1)"),
)
BODY = csv_bytes(HEADER, ROWS)


def resting(job: dict[str, object]) -> bool:
    """A preview's run is over: it rests in ready, or it failed (or was cancelled)."""
    return job["status"] in TERMINAL or (job["status"] == "ready" and job["awaiting_apply"] is True)


async def _preview(http: httpx.AsyncClient, bearer: str, body: bytes = BODY) -> dict[str, object]:
    response = await upload(http, bearer, body, "lista.csv", preview="true")
    assert response.status_code == 202, response.text
    return await wait_until(http, bearer, str(response.json()["id"]), resting)


async def test_a_preview_rests_ready_writes_nothing_and_its_apply_imports_what_it_showed(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int], tmp_path: Path
) -> None:
    client = next(client_ids)
    bearer = token(client)
    pre = tmp_path / "pre.csv"
    pre.write_bytes(csv_bytes(HEADER, [("Ana Velha", cpf(301), "", "Bronze")]))
    await import_file(server.dsn, pre, client)
    before = await tables_checksum(server.dsn)
    job = await _preview(http, bearer)
    assert job["status"] == "ready", job
    assert (job["phase"], job["eta_s"]) == (None, None)  # resting: nothing runs until the apply
    assert await tables_checksum(server.dsn) == before  # byte-identical contact tables
    preview = job["preview"]
    assert isinstance(preview, dict)
    assert preview["counters"] == {
        "rows_read": 5,
        "inserted": 2,
        "updated": 2,
        "invalid": 1,
        "error": 0,
        "ignored": 0,
    }
    assert preview["fields"]["name"] == {"first": 2, "changed": 1, "kept": 0}
    assert preview["fields"]["custom:plano"] == {"first": 2, "changed": 1, "kept": 0}
    assert job["preview_expires_at"] is not None
    assert counters(job)["rows_read"] == 0  # nothing imported yet
    errors = await http.get(f"/v1/imports/{job['id']}/errors?format=jsonl", headers=auth(bearer))
    assert [line for line in errors.text.splitlines() if '"invalid"' in line]
    # another tenant cannot apply it
    other = auth(token(next(client_ids)))
    assert (await http.post(f"/v1/imports/{job['id']}/apply", headers=other)).status_code == 404
    applied = await http.post(f"/v1/imports/{job['id']}/apply", headers=auth(bearer))
    assert applied.status_code == 202, applied.text
    assert applied.json()["awaiting_apply"] is False
    done = await wait_terminal(http, bearer, str(job["id"]))
    assert done["status"] == "completed", done
    assert counters(done) == preview["counters"]
    assert done["counters_differ_from_preview"] is False
    again = await http.post(f"/v1/imports/{job['id']}/apply", headers=auth(bearer))
    assert (again.status_code, again.json()["error"]) == (409, "import_already_applied")
    errors = await http.get(f"/v1/imports/{job['id']}/errors?format=jsonl", headers=auth(bearer))
    assert len([line for line in errors.text.splitlines() if '"invalid"' in line]) == 1  # once


async def test_an_apply_after_someone_wrote_says_its_counters_differ(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int], tmp_path: Path
) -> None:
    client = next(client_ids)
    bearer = token(client)
    job = await _preview(http, bearer)
    assert job["status"] == "ready"
    meanwhile = tmp_path / "meanwhile.csv"
    meanwhile.write_bytes(csv_bytes(HEADER, [("Bia Antes", cpf(302), "", "")]))
    await import_file(server.dsn, meanwhile, client)
    applied = await http.post(f"/v1/imports/{job['id']}/apply", headers=auth(bearer))
    assert applied.status_code == 202
    done = await wait_terminal(http, bearer, str(job["id"]))
    assert done["status"] == "completed"
    assert counters(done)["inserted"] == 2  # Bia now existed: an update (the preview: 3)
    assert done["counters_differ_from_preview"] is True


async def test_only_a_resting_unexpired_preview_is_applied(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    plain = await upload(http, bearer, BODY, "lista.csv")
    plain_job = await wait_terminal(http, bearer, str(plain.json()["id"]))
    refused = await http.post(f"/v1/imports/{plain_job['id']}/apply", headers=auth(bearer))
    assert (refused.status_code, refused.json()["error"]) == (409, "not_a_preview")
    expired = await _preview(http, bearer)
    await fetch(
        server.dsn,
        "UPDATE import_job SET preview_expires_at = now() - interval '1 second' WHERE id = $1",
        expired["id"],
    )
    before = await tables_checksum(server.dsn)
    late = await http.post(f"/v1/imports/{expired['id']}/apply", headers=auth(bearer))
    assert (late.status_code, late.json()["error"]) == (409, "preview_expired")
    gone = (await http.get(f"/v1/imports/{expired['id']}", headers=auth(bearer))).json()
    assert (gone["status"], gone["awaiting_apply"]) == ("cancelled", False)
    assert await tables_checksum(server.dsn) == before
    cancelled = await _preview(http, bearer)
    response = await http.post(f"/v1/imports/{cancelled['id']}/cancel", headers=auth(bearer))
    assert response.json()["status"] == "cancelled"  # at once: no run holds a resting preview


async def test_max_invalid_fails_before_any_write_and_passes_at_its_limit(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    before = await tables_checksum(server.dsn)
    over = await upload(http, bearer, BODY, "lista.csv", max_invalid="0")
    assert over.status_code == 202, over.text
    failed = await wait_terminal(http, bearer, str(over.json()["id"]))
    assert (failed["status"], failed["fail_reason"]) == ("failed", "too_many_invalid_rows")
    assert failed["validation"] == {
        "max_invalid": "0",
        "rows_read": 5,
        "invalid": 1,
        "exceeded": True,
    }
    assert counters(failed) == {
        "rows_read": 5,
        "inserted": 0,
        "updated": 0,
        "invalid": 1,
        "error": 0,
        "ignored": 4,
    }
    assert await tables_checksum(server.dsn) == before  # nothing written
    report = await http.get(f"/v1/imports/{failed['id']}/errors?format=jsonl", headers=auth(bearer))
    assert len(report.text.splitlines()) >= 1
    at = await upload(http, bearer, BODY, "lista.csv", max_invalid="20%")
    done = await wait_terminal(http, bearer, str(at.json()["id"]))
    assert done["status"] == "completed_with_placeholders", done
    assert counters(done)["inserted"] == 3
    bad = await upload(http, bearer, BODY, "lista.csv", max_invalid="lots")
    assert bad.status_code == 400
    assert "max_invalid" in bad.text
