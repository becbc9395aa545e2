"""Imports through the HTTP API: create, watch, list, report, cancel, start from a key, HSM."""

from __future__ import annotations

import asyncio
import csv
import io
import itertools
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import boto3
import httpx
import orjson
import pytest

from tests.api.conftest import Server
from tests.api.support import (
    ADMIN,
    HSM,
    LGPD,
    TERMINAL,
    auth,
    counters,
    csv_bytes,
    sha256,
    token,
    upload,
    wait_terminal,
)
from tests.support import bad_cpf, cpf, db_state, fetch, finalization_counts, import_file
from tests.xlsx_support import write_workbook

pytestmark = pytest.mark.api

HEADER = ("nome", "cpf", "email", "telefone")
ROWS = (
    ("Ana", cpf(101), "ana@example.com", "11987654321"),
    ("Bia", cpf(102), "not-an-email", ""),
    ("Ana Maria", cpf(101), "", "11912345678"),
    ("Caio", bad_cpf(103), "caio@example.com", ""),
    ("Duda", cpf(104), "", ""),
)


async def test_multipart_import_completes_with_the_cli_counters(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int], tmp_path: Path
) -> None:
    client = next(client_ids)
    bearer = token(client)
    response = await upload(http, bearer, csv_bytes(HEADER, ROWS), "lista.csv", tags="a,b")
    assert response.status_code == 202, response.text
    created = response.json()
    assert created["status"] == "queued"
    assert created["filename"] == "lista.csv"
    assert created["user_id"] == "ana"
    assert created["tags"] == ["a", "b"]
    assert created["sha256"] == sha256(csv_bytes(HEADER, ROWS))
    job = await wait_terminal(http, bearer, str(created["id"]))
    assert job["status"] == "completed"
    # The same rows imported in-process, for another tenant of the same database.
    reference_client = next(client_ids)
    path = tmp_path / "same.csv"
    path.write_bytes(csv_bytes(HEADER, ROWS))
    outcome = await import_file(server.dsn, path, reference_client)
    expected = outcome.counters
    assert counters(job) == {
        "rows_read": expected.rows_read,
        "inserted": expected.inserted,
        "updated": expected.updated,
        "invalid": expected.invalid,
        "error": expected.error,
        "ignored": expected.ignored,
    }
    assert counters(job)["inserted"] == 3
    assert await db_state(server.dsn, client) == await db_state(server.dsn, reference_client)
    assert job["progress"] == {
        "rows": 5,
        "bytes": len(csv_bytes(HEADER, ROWS)),
        "bytes_total": len(csv_bytes(HEADER, ROWS)),
        "percent": 100.0,
        "rows_per_s": None,
    }
    assert (job["eta_s"], job["phase"], job["queue_position"]) == (None, None, None)
    assert job["started_at"] is not None
    assert job["finished_at"] is not None
    assert await finalization_counts(server.dsn, uuid.UUID(str(job["id"]))) == (1, 1)


async def test_validation_errors_are_a_400_list(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    response = await http.post(
        "/v1/imports",
        data={"conflict_strategy": "upsert", "journey_id": "3", "colour": "red"},
        files={"file": ("a.csv", b"cpf\n1\n", "text/csv")},
        headers=auth(bearer),
    )
    assert response.status_code == 400
    problems = response.json()
    assert all(set(p) == {"field", "message"} for p in problems)
    fields = {p["field"] for p in problems}
    assert {
        "colour",
        "conflict_strategy",
        "has_sensitive_data",
        "lgpd_processing_hypothesis",
        "auto_start_journey_mailing",
    } <= fields
    fields_only = {
        name: (None, value) for name, value in {"conflict_strategy": "merge", **LGPD}.items()
    }
    missing_file = await http.post("/v1/imports", files=fields_only, headers=auth(bearer))
    assert missing_file.status_code == 400
    assert missing_file.json() == [{"field": "file", "message": "is required"}]
    bad_layout = await upload(http, bearer, b"cpf\n1\n", layout='{"columns": {"a": "nope"}}')
    assert bad_layout.status_code == 400
    assert bad_layout.json()[0]["field"] == "layout.columns.a"
    misspelt = await upload(http, bearer, b"cpf\n1\n", layout='{"delimeter": ";"}')
    assert misspelt.status_code == 400
    assert misspelt.json() == [
        {
            "field": "layout.delimeter",
            "message": "unknown key 'delimeter' in layout (did you mean 'delimiter'?)",
        }
    ]
    not_json = await http.post(
        "/v1/imports",
        content=b"{",
        headers={**auth(bearer), "Content-Type": "application/json"},
    )
    assert not_json.status_code == 400
    assert not_json.json() == [{"field": "body", "message": "is not valid JSON"}]
    other = await http.post(
        "/v1/imports", content=b"x", headers={**auth(bearer), "Content-Type": "text/plain"}
    )
    assert other.status_code == 415
    assert other.json()["error"] == "unsupported_media_type"
    history = await http.get("/v1/imports", headers=auth(bearer))
    assert history.json()["items"] == []  # no job was left behind by a refused request


async def test_fields_after_the_file_and_jsonl_format(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    lines = b"".join(
        orjson.dumps({"name": f"P{i}", "cpf_cnpj": cpf(200 + i)}) + b"\n" for i in range(3)
    )
    boundary = "b0undary"
    parts = [
        ("file", lines, "people.data"),
        *((name, value.encode(), None) for name, value in {**LGPD, "format": "jsonl"}.items()),
        ("conflict_strategy", b"discard", None),
    ]
    body = b""
    for name, value, filename in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode()
        body += value + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    response = await http.post(
        "/v1/imports",
        content=body,
        headers={**auth(bearer), "Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert response.status_code == 202, response.text
    job = await wait_terminal(http, bearer, response.json()["id"])
    assert (job["status"], job["format"], job["conflict_strategy"]) == (
        "completed",
        "jsonl",
        "discard",
    )
    assert counters(job)["inserted"] == 3


async def test_sse_sends_progress_then_done(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    rows = [(f"N{i}", cpf(300 + i), "", "") for i in range(40)]
    created = (await upload(http, bearer, csv_bytes(HEADER, rows))).json()
    events: list[tuple[str, dict[str, object]]] = []
    async with asyncio.timeout(30):
        async with http.stream(
            "GET", f"/v1/imports/{created['id']}/events", headers=auth(bearer)
        ) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            event = ""
            async for line in stream.aiter_lines():
                if line.startswith("event: "):
                    event = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    events.append((event, orjson.loads(line.removeprefix("data: "))))
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "progress"
    assert kinds[-1] == "done"
    assert kinds.count("done") == 1
    assert events[-1][1]["status"] == "completed"
    assert counters(events[-1][1])["inserted"] == 40


async def test_history_newest_first_with_cursor_and_filters(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    ana, bob, admin = token(client, "ana"), token(client, "bob"), token(client, "root", [ADMIN])
    ids = []
    for i in range(3):
        response = await upload(http, ana, csv_bytes(HEADER, [("A", cpf(400 + i), "", "")]))
        ids.append(response.json()["id"])
    bobs = (await upload(http, bob, csv_bytes(HEADER, [("B", cpf(410), "", "")]))).json()["id"]
    for job_id in ids:
        await wait_terminal(http, ana, job_id)
    first = (await http.get("/v1/imports?limit=2", headers=auth(ana))).json()
    assert [j["id"] for j in first["items"]] == [ids[2], ids[1]]  # ana sees her own only
    assert first["next_cursor"]
    second = await http.get(
        "/v1/imports", params={"limit": 2, "cursor": first["next_cursor"]}, headers=auth(ana)
    )
    assert [j["id"] for j in second.json()["items"]] == [ids[0]]
    assert second.json()["next_cursor"] is None
    everyone = (await http.get("/v1/imports", headers=auth(admin))).json()["items"]
    assert [j["id"] for j in everyone] == [bobs, ids[2], ids[1], ids[0]]
    only_bob = await http.get("/v1/imports", params={"user_id": "bob"}, headers=auth(admin))
    assert [j["id"] for j in only_bob.json()["items"]] == [bobs]
    completed = await http.get(
        "/v1/imports", params=[("status", "completed"), ("status", "failed")], headers=auth(ana)
    )
    assert {j["status"] for j in completed.json()["items"]} == {"completed"}
    forbidden = await http.get("/v1/imports", params={"user_id": "bob"}, headers=auth(ana))
    assert forbidden.status_code == 403
    assert forbidden.json()["error"] == "forbidden"
    for query in ({"limit": "0"}, {"limit": "101"}, {"status": "done"}, {"cursor": "zzz"}):
        bad = await http.get("/v1/imports", params=query, headers=auth(ana))
        assert bad.status_code == 400, query
        assert bad.json()[0]["field"] in query


async def test_error_report_csv_is_neutralized_and_jsonl_is_raw(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    hyperlink = '=HYPERLINK("http://evil.example","click")'
    content = csv_bytes(
        HEADER,
        [(hyperlink, cpf(500), "@bad", ""), ("X", hyperlink, "", ""), ("Y", "+55", "", "")],
    )
    created = (await upload(http, bearer, content)).json()
    job = await wait_terminal(http, bearer, created["id"])
    assert counters(job)["invalid"] == 2
    report = await http.get(f"/v1/imports/{created['id']}/errors", headers=auth(bearer))
    assert report.status_code == 200
    assert report.headers["content-type"].startswith("text/csv")
    assert report.headers["content-disposition"].startswith("attachment;")
    rows = list(csv.DictReader(io.StringIO(report.text)))
    assert [r["value"] for r in rows] == ["'@bad", "'" + hyperlink, "'+55"]
    jsonl = await http.get(
        f"/v1/imports/{created['id']}/errors", params={"format": "jsonl"}, headers=auth(bearer)
    )
    assert jsonl.headers["content-disposition"].endswith('.jsonl"')
    values = [orjson.loads(line)["value"] for line in jsonl.text.splitlines()]
    assert values == ["@bad", hyperlink, "+55"]
    bad_format = await http.get(
        f"/v1/imports/{created['id']}/errors", params={"format": "xlsx"}, headers=auth(bearer)
    )
    assert bad_format.status_code == 400


async def test_a_utf8_file_read_as_cp1252_warns_in_the_status_and_the_report(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    """Issue 11: the import runs, and suspect_encoding says a person should look."""
    bearer = token(next(client_ids))
    content = csv_bytes(HEADER, [("Conceição", cpf(510), "", ""), ("Ana", cpf(511), "", "")])
    layout = orjson.dumps({"encoding": "cp1252"}).decode()
    created = (await upload(http, bearer, content, layout=layout)).json()
    job = await wait_terminal(http, bearer, created["id"])
    assert job["status"] == "completed"
    (warning,) = job["warnings"]  # type: ignore[misc]
    assert warning["code"] == "suspect_encoding"
    assert "Ã§" in warning["message"]
    report = await http.get(f"/v1/imports/{created['id']}/errors", headers=auth(bearer))
    first = next(csv.DictReader(io.StringIO(report.text)))
    assert (first["line"], first["reason"], first["severity"]) == (
        "0",
        "suspect_encoding",
        "warning",
    )
    jsonl = await http.get(
        f"/v1/imports/{created['id']}/errors", params={"format": "jsonl"}, headers=auth(bearer)
    )
    assert orjson.loads(jsonl.text.splitlines()[0])["reason"] == "suspect_encoding"


def put_object(server: Server, key: str, content: bytes) -> None:
    """Place a file in the server's bucket as another service of the platform would."""
    s3 = boto3.client(
        "s3",
        endpoint_url=server.env["S3_ENDPOINT_URL"],
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    )
    s3.put_object(Bucket=server.env["IMPORTER_BUCKET"], Key=key, Body=content)


async def test_create_from_key_then_start_idempotent_then_409(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    bearer = token(client)
    content = csv_bytes(HEADER, [("K", cpf(600), "", ""), ("L", cpf(601), "", "")])
    key = f"{client}/drop/contacts.csv"
    put_object(server, key, content)
    body = {
        "key": key,
        "size": len(content),
        "sha256": sha256(content),
        "conflict_strategy": "merge",
        **LGPD,
    }
    created = await http.post("/v1/imports", json=body, headers=auth(bearer))
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    assert created.json()["status"] == "uploaded"
    assert created.json()["filename"] == "contacts.csv"
    starts = await asyncio.gather(
        *(
            http.post(
                f"/v1/imports/{job_id}/start",
                headers={**auth(bearer), "Idempotency-Key": f"op-{i}"},
            )
            for i in range(20)  # the 20 concurrent starts: one transition, one run
        )
    )
    codes = [s.status_code for s in starts]
    assert codes.count(202) >= 1
    assert set(codes) <= {202, 409}, [s.text for s in starts]
    assert all(
        s.json()["error"] == "import_already_applied" for s in starts if s.status_code == 409
    )
    job = await wait_terminal(http, bearer, job_id)
    assert job["status"] == "completed"
    assert counters(job)["inserted"] == 2
    again = await http.post(f"/v1/imports/{job_id}/start", headers=auth(bearer))
    assert again.status_code == 409
    assert again.json()["error"] == "import_already_applied"
    assert await finalization_counts(server.dsn, uuid.UUID(job_id)) == (1, 1)


async def test_key_outside_the_tenant_is_refused(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    victim, attacker = next(client_ids), next(client_ids)
    content = csv_bytes(HEADER, [("V", cpf(610), "", "")])
    put_object(server, f"{victim}/secret.csv", content)
    for key in (f"{victim}/secret.csv", f"{attacker}/../{victim}/secret.csv", "/etc/passwd"):
        body = {"key": key, "size": len(content), "sha256": sha256(content)}
        response = await http.post(
            "/v1/imports",
            json={**body, "conflict_strategy": "merge", **LGPD},
            headers=auth(token(attacker)),
        )
        assert response.status_code == 400, key
        assert response.json()[0]["field"] == "key"


async def test_cancel_an_uploaded_job_and_a_finished_one(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    bearer = token(client)
    content = csv_bytes(HEADER, [("C", cpf(700), "", "")])
    put_object(server, f"{client}/c.csv", content)
    body = {"key": f"{client}/c.csv", "size": len(content), "sha256": sha256(content)}
    created = await http.post(
        "/v1/imports", json={**body, "conflict_strategy": "merge", **LGPD}, headers=auth(bearer)
    )
    job_id = created.json()["id"]
    cancelled = await http.post(f"/v1/imports/{job_id}/cancel", headers=auth(bearer))
    assert cancelled.status_code == 202, cancelled.text
    job = await wait_terminal(http, bearer, job_id)
    assert job["status"] == "cancelled"
    assert counters(job)["rows_read"] == 0
    start = await http.post(f"/v1/imports/{job_id}/start", headers=auth(bearer))
    assert start.status_code == 409


async def wait_for(
    http: httpx.AsyncClient, bearer: str, job_id: str, ready: Callable[[dict], bool]
) -> dict[str, object]:
    """Poll the job until ``ready`` holds (a deadline, no fixed sleep)."""
    deadline = time.monotonic() + 30
    while True:
        job = (await http.get(f"/v1/imports/{job_id}", headers=auth(bearer))).json()
        if ready(job):
            return job
        assert job["status"] not in TERMINAL, job
        assert time.monotonic() < deadline, job
        await asyncio.sleep(0.02)


async def test_progress_eta_and_cancel_of_a_running_and_a_queued_job(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    """The server runs 2 workers and at most 2 imports per client: of three uploads of one
    client, two run and the third waits queued, deterministically."""
    bearer = token(next(client_ids))
    rows = [(f"N{i}", cpf(20_000 + i), "", "") for i in range(2500)]
    content = csv_bytes(HEADER, rows)
    running, other, waiting = [
        (await upload(http, bearer, content, f"big{i}.csv")).json()["id"] for i in range(3)
    ]
    job = await wait_for(
        http, bearer, running, lambda j: j["status"] == "importing" and j["progress"]["bytes"] > 0
    )
    assert 0 < job["progress"]["percent"] < 100
    assert job["progress"]["bytes_total"] == len(content)
    assert job["eta_s"] is not None
    assert job["eta_s"] >= 0
    queued = (await http.get(f"/v1/imports/{waiting}", headers=auth(bearer))).json()
    assert queued["status"] == "queued"
    assert queued["eta_s"] is None
    cancelled = await http.post(f"/v1/imports/{waiting}/cancel", headers=auth(bearer))
    assert cancelled.status_code == 202
    assert cancelled.json()["status"] == "cancelled"  # no worker had it: cancelled at once
    assert counters(cancelled.json())["rows_read"] == 0
    requested = await http.post(f"/v1/imports/{running}/cancel", headers=auth(bearer))
    assert requested.status_code == 202
    assert requested.json()["cancel_requested"] is True
    stopped = await wait_terminal(http, bearer, running)
    assert stopped["status"] == "cancelled"
    c = counters(stopped)
    assert 0 < c["rows_read"] < len(rows)  # stopped between chunks, counters truthful
    assert c["rows_read"] == sum(
        c[k] for k in ("inserted", "updated", "invalid", "error", "ignored")
    )
    await http.post(f"/v1/imports/{other}/cancel", headers=auth(bearer))
    assert (await wait_terminal(http, bearer, other))["status"] in ("cancelled", "completed")
    again = await http.post(f"/v1/imports/{running}/cancel", headers=auth(bearer))
    assert again.status_code == 202  # a repeat changes nothing
    assert again.json()["status"] == "cancelled"


async def test_hsm_import_holds_its_firing_until_completed(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    content = csv_bytes(HEADER, [("H", cpf(900), "", "11987654321")])
    refused = await upload(
        http, token(client), content, path="/v1/hsm/intents/import", intent='{"kind": "hsm"}'
    )
    assert refused.status_code == 403  # CONTACT_IMPORT.CREATE is not HSM.CREATE
    bearer = token(client, permissions=[HSM])
    no_intent = await upload(http, bearer, content, path="/v1/hsm/intents/import")
    assert no_intent.status_code == 400
    assert no_intent.json() == [{"field": "intent", "message": "is required"}]
    intent = orjson.dumps({"kind": "hsm", "params": {"template_id": "welcome"}}).decode()
    response = await upload(http, bearer, content, path="/v1/hsm/intents/import", intent=intent)
    assert response.status_code == 202, response.text
    job_id = uuid.UUID(response.json()["id"])
    job = await wait_terminal(http, bearer, str(job_id))
    assert job["status"] == "completed"
    (firing,) = await fetch(
        server.dsn,
        "SELECT id, kind, params, released_at FROM firing_intent WHERE import_job_id = $1",
        job_id,
    )
    assert firing["kind"] == "hsm"
    assert orjson.loads(firing["params"]) == {"template_id": "welcome"}
    assert firing["released_at"] is not None
    released = await fetch(
        server.dsn,
        "SELECT topic FROM outbox WHERE message_id = $1",
        f"firing:{firing['id']}",
    )
    assert [r["topic"] for r in released] == ["hsm/importing-intent"]


async def test_journey_waits_for_the_import_then_starts(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    bearer = token(client)
    (journey,) = await fetch(
        server.dsn,
        "INSERT INTO journey (client_id, name) VALUES ($1, 'welcome') RETURNING id",
        client,
    )
    journey_rows = [("J", cpf(1800), "j"), ("K", cpf(1801), "k")]
    content = csv_bytes(("nome", "cpf", "jornada"), journey_rows)
    foreign = await upload(
        http,
        token(next(client_ids)),
        content,
        journey_id=str(journey["id"]),
        auto_start_journey_mailing="true",
    )
    assert foreign.status_code == 400  # another tenant's journey does not exist for this one
    response = await upload(
        http,
        bearer,
        content,
        "j.csv",
        journey_id=str(journey["id"]),
        auto_start_journey_mailing="true",
    )
    assert response.status_code == 202, response.text
    assert response.json()["journey_id"] == journey["id"]
    job = await wait_terminal(http, bearer, response.json()["id"])
    assert job["status"] == "completed"
    (classification,) = await fetch(
        server.dsn,
        "SELECT status, contact_amount, description FROM journey_classification_contact"
        " WHERE import_job_id = $1",
        uuid.UUID(str(job["id"])),
    )
    assert dict(classification) == {"status": "ACTIVE", "contact_amount": 2, "description": "j.csv"}


async def test_journey_column_links_contacts_and_paused_waits(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    """Seed 003 §9: rows whose layout maps a journey column join the import's journey
    classification (one journey_contact per contact and journey value, new or stored contact);
    with auto start off the classification ends PAUSED."""
    client = next(client_ids)
    bearer = token(client)
    (journey,) = await fetch(
        server.dsn,
        "INSERT INTO journey (client_id, name) VALUES ($1, 'onboarding') RETURNING id",
        client,
    )
    first = csv_bytes(("nome", "cpf", "jornada"), [("A", cpf(1900), "")])
    done = await upload(http, bearer, first, "before.csv")
    assert (await wait_terminal(http, bearer, done.json()["id"]))["status"] == "completed"
    rows = [("A", cpf(1900), "onb-a"), ("B", cpf(1901), "onb-b"), ("C", cpf(1902), "")]
    response = await upload(
        http,
        bearer,
        csv_bytes(("nome", "cpf", "jornada"), rows),
        "journey.csv",
        journey_id=str(journey["id"]),
        auto_start_journey_mailing="false",
    )
    assert response.status_code == 202, response.text
    job = await wait_terminal(http, bearer, response.json()["id"])
    assert job["status"] == "completed"
    job_id = uuid.UUID(str(job["id"]))
    (classification,) = await fetch(
        server.dsn,
        "SELECT id, status, contact_amount FROM journey_classification_contact"
        " WHERE import_job_id = $1",
        job_id,
    )
    # contact_amount: the classification's distinct contacts (C has no journey channel)
    assert (classification["status"], classification["contact_amount"]) == ("PAUSED", 2)
    linked = await fetch(
        server.dsn,
        "SELECT c.cpf_cnpj, d.value, d.channel_id, j.client_id FROM journey_contact j"
        " JOIN contact c ON c.id = j.contact_id"
        " JOIN contact_details d ON d.id = j.contact_detail_id"
        " WHERE j.journey_classification_contact_id = $1 ORDER BY c.cpf_cnpj",
        classification["id"],
    )
    assert [tuple(r) for r in linked] == [
        (cpf(1900), "onb-a", 4, client),  # a stored contact joins too
        (cpf(1901), "onb-b", 4, client),
    ]


async def test_email_intent_is_released_on_the_hsm_queue_with_the_email_channel(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    """Seed 003 §10: an e-mail firing intent waits for its import, then goes out as
    ``hsm/importing-intent`` carrying the e-mail channel (3)."""
    client = next(client_ids)
    bearer = token(client, permissions=[HSM])
    content = csv_bytes(HEADER, [("E", cpf(1950), "e@example.com", "")])
    intent = orjson.dumps({"kind": "email", "params": {"template_id": "news"}}).decode()
    response = await upload(http, bearer, content, path="/v1/hsm/intents/import", intent=intent)
    assert response.status_code == 202, response.text
    job = await wait_terminal(http, bearer, response.json()["id"])
    assert job["status"] == "completed"
    (firing,) = await fetch(
        server.dsn,
        "SELECT id, kind, released_at FROM firing_intent WHERE import_job_id = $1",
        uuid.UUID(str(job["id"])),
    )
    assert firing["kind"] == "email"
    assert firing["released_at"] is not None
    (message,) = await fetch(
        server.dsn,
        "SELECT topic, payload FROM outbox WHERE message_id = $1",
        f"firing:{firing['id']}",
    )
    assert message["topic"] == "hsm/importing-intent"
    assert orjson.loads(message["payload"]) == {"id": firing["id"], "channelId": 3}


async def test_an_email_keyed_layout_matches_by_email_and_reports_its_reasons(
    server: Server, http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    """Issue 14 point 5: a create whose layout names ``"key": "email"`` (its CPF column
    ignored) updates the contact that has the e-mail, creates the others without a CPF, and its
    error report says missing_key / ambiguous_key; the job runs in the server's key partitions
    (core.keys.KeyGroups), as a CPF-keyed one does."""
    client = next(client_ids)
    bearer = token(client)
    pre = csv_bytes(HEADER, [("Ana", cpf(801), "ana@x.com", ""), ("Bia", cpf(802), "b@x.com", ""),
                             ("Bea", cpf(803), "b@x.com", "")])  # fmt: skip
    first = (await upload(http, bearer, pre)).json()
    assert (await wait_terminal(http, bearer, first["id"]))["status"] == "completed"
    body = csv_bytes(
        HEADER,
        [("Ana Maria", cpf(900), "ana@x.com", ""), ("Eva", "", "eva@x.com", ""),
         ("Zed", cpf(901), "", ""), ("Bi", "", "b@x.com", "")],
    )  # fmt: skip
    layout = orjson.dumps({"key": "email", "columns": {"cpf": "ignore"}}).decode()
    created = (await upload(http, bearer, body, layout=layout)).json()
    job = await wait_terminal(http, bearer, created["id"])
    assert job["status"] == "completed", job
    counters = job["counters"]
    assert isinstance(counters, dict)
    assert (counters["inserted"], counters["updated"], counters["invalid"]) == (1, 1, 2)
    partitions = await fetch(server.dsn, "SELECT partitions FROM import_job WHERE id IN ($1, $2)",
                             uuid.UUID(first["id"]), uuid.UUID(created["id"]))  # fmt: skip
    assert [r["partitions"] for r in partitions] == [2, 2]
    report = await http.get(f"/v1/imports/{created['id']}/errors", headers=auth(bearer))
    reasons = [(r["line"], r["reason"]) for r in csv.DictReader(io.StringIO(report.text))]
    assert reasons == [("4", "missing_key"), ("5", "ambiguous_key")]
    stored = await fetch(
        server.dsn,
        "SELECT cpf_cnpj, name FROM contact WHERE client_id = $1 ORDER BY name",
        client,
    )
    assert [tuple(r) for r in stored] == [
        (cpf(801), "Ana Maria"), (cpf(803), "Bea"), (cpf(802), "Bia"), (None, "Eva"),
    ]  # fmt: skip


async def test_a_layout_keyed_by_email_refuses_replace_and_a_mapped_cpf(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    content = csv_bytes(HEADER, [("Ana", cpf(810), "ana@x.com", "")])
    replace = orjson.dumps({"key": "email", "merge": {"channels": "replace"}}).decode()
    refused = await upload(http, bearer, content, layout=replace)
    assert refused.status_code == 400
    assert refused.json()[0]["field"] == "layout.merge.channels"
    mapped = orjson.dumps({"key": "email"}).decode()  # the file's cpf column maps to cpf_cnpj
    job = await wait_terminal(
        http, bearer, (await upload(http, bearer, content, layout=mapped)).json()["id"]
    )
    assert (job["status"], job["fail_reason"]) == ("failed", "invalid_layout")


async def test_the_source_report_gives_the_rejected_rows_as_sent_and_imports_again(
    server: Server, http: httpx.AsyncClient, client_ids: itertools.count[int], tmp_path: Path
) -> None:
    """Issue 15 point 2: ``?format=source`` is the file's header and each rejected row as it
    was sent (its delimiter, its cells, formula-safe) behind ``importer_error``; sent again, it
    rejects the same rows — and another tenant gets a 404."""
    client = next(client_ids)
    bearer = token(client)
    content = (
        "nome;cpf;email;telefone\n"
        "Ana;" + cpf(820) + ";ana@x.com;\n"
        "=Bob;123;bob@x.com;+55 11 91234-5678\n"
        '"Caio\nJr";;c@x.com;\n'
    ).encode()
    job = await wait_terminal(http, bearer, (await upload(http, bearer, content)).json()["id"])
    assert job["status"] == "completed"
    url = f"/v1/imports/{job['id']}/errors"
    sent = await http.get(url, params={"format": "source"}, headers=auth(bearer))
    assert sent.status_code == 200
    assert sent.headers["content-type"].startswith("text/csv")
    assert list(csv.reader(io.StringIO(sent.text), delimiter=";")) == [
        ["importer_error", "nome", "cpf", "email", "telefone"],
        ["line 3: invalid_cpf (cpf)", "'=Bob", "123", "bob@x.com", "'+55 11 91234-5678"],
        ["line 4: missing_cpf_cnpj (cpf)", "Caio\nJr", "", "c@x.com", ""],
    ]
    other = await http.get(url, params={"format": "source"}, headers=auth(token(next(client_ids))))
    assert other.status_code == 404
    again = await upload(http, bearer, sent.content, "fixed-later.csv")
    redone = await wait_terminal(http, bearer, again.json()["id"])
    assert redone["status"] == "completed"  # no importer_error custom field: no placeholders
    assert counters(redone)["invalid"] == 2
    fields = await fetch(
        server.dsn, "SELECT name FROM custom_field WHERE client_id = $1 ORDER BY name", client
    )
    assert "importer_error" not in [r["name"] for r in fields]


async def test_the_source_report_of_a_workbook_is_csv_of_its_sheet(
    http: httpx.AsyncClient, client_ids: itertools.count[int], tmp_path: Path
) -> None:
    bearer = token(next(client_ids))
    path = write_workbook(
        tmp_path / "w.xlsx", [["nome", "cpf"], ["Ana", cpf(830)], ["Bob", "999"], ["Zed", None]]
    )
    created = await upload(http, bearer, path.read_bytes(), "w.xlsx")
    job = await wait_terminal(http, bearer, created.json()["id"])
    assert job["status"] == "completed"
    sent = await http.get(
        f"/v1/imports/{job['id']}/errors", params={"format": "source"}, headers=auth(bearer)
    )
    assert list(csv.reader(io.StringIO(sent.text))) == [
        ["importer_error", "nome", "cpf"],
        ["line 3: invalid_cpf (cpf)", "Bob", "999"],
        ["line 4: missing_cpf_cnpj (cpf)", "Zed", ""],
    ]
