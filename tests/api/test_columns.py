"""The columns step over HTTP (issue 29): see the columns of an uploaded file with samples and
suggestions, set the mapping, start with it, and the client's memory learns it.

Uploads go the two-step way (announce, PUT to the presigned URL, confirm), which leaves the job
``uploaded``: the columns step sits between the upload and the start.
"""

from __future__ import annotations

import itertools

import httpx
import pytest

from tests.api.conftest import Server
from tests.api.support import (
    ADMIN,
    CREATE,
    LGPD,
    auth,
    csv_bytes,
    sha256,
    token,
    upload,
    wait_terminal,
)
from tests.support import cpf, fetch

pytestmark = pytest.mark.api

HEADER = ("Nome completo", "Coluna 2", "Telefone com DDD", "Plano", "Obs")


def rows(start: int, count: int) -> list[tuple[str, ...]]:
    return [
        (f"Pessoa {i}", cpf(start + i), f"(11) 9876{i % 10}-43{i % 10}1", "ouro", f"=1+{i}")
        for i in range(count)
    ]


async def uploaded(http: httpx.AsyncClient, bearer: str, content: bytes, **options: object) -> str:
    """A job ``uploaded`` (not started) holding ``content``; its id."""
    body = {
        "filename": "contatos.csv",
        "size": len(content),
        "sha256": sha256(content),
        "conflict_strategy": "merge",
        **LGPD,
        **options,
    }
    created = await http.post("/v1/uploads", json=body, headers=auth(bearer))
    assert created.status_code == 201, created.text
    job_id: str = created.json()["job"]["id"]
    async with httpx.AsyncClient(timeout=20) as direct:
        put = await direct.put(created.json()["upload"]["url"], content=content)
    assert put.status_code == 200, put.text
    confirmed = await http.post(f"/v1/imports/{job_id}/uploaded", headers=auth(bearer))
    assert confirmed.json()["status"] == "uploaded", confirmed.text
    return job_id


async def custom_field(server: Server, client_id: int, name: str) -> int:
    rows = await fetch(
        server.dsn,
        "INSERT INTO custom_field (client_id, name) VALUES ($1, $2) RETURNING id",
        client_id,
        name,
    )
    return int(rows[0]["id"])


def by_header(document: dict[str, object]) -> dict[str, dict[str, object]]:
    columns = document["columns"]
    assert isinstance(columns, list)
    return {str(c["header"]): c for c in columns}


MAPPING = {
    "columns": [
        {"position": 0, "target": "name"},
        {"position": 1, "target": "cpf_cnpj"},
        {"position": 2, "target": "whatsapp"},
        {"position": 4, "target": "new_custom_field", "name": "Observação"},
    ]
}


async def test_columns_suggest_then_the_mapping_imports_and_is_remembered(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    bearer = token(client)
    plano = await custom_field(server, client, "Plano")
    job_id = await uploaded(http, bearer, csv_bytes(HEADER, rows(3100, 8)))

    shown = await http.get(f"/v1/imports/{job_id}/columns", headers=auth(bearer))
    assert shown.status_code == 200, shown.text
    document = shown.json()
    assert document["mapped"] is False
    assert document["custom_fields"] == [{"id": plano, "name": "Plano"}]
    columns = by_header(document)
    assert [c["position"] for c in document["columns"]] == [0, 1, 2, 3, 4]
    assert columns["Nome completo"]["suggestion"]["target"] == "name"
    assert columns["Nome completo"]["suggestion"]["reason"] == "alias"
    key = columns["Coluna 2"]["suggestion"]
    assert (key["target"], key["reason"], key["share"]) == ("cpf_cnpj", "values", 1.0)
    assert columns["Telefone com DDD"]["suggestion"]["target"] == "phone"
    field = columns["Plano"]["suggestion"]
    assert (field["target"], field["reason"]) == ("custom_field", "custom_field")
    assert field["custom_field"] == {"id": plano, "name": "Plano"}
    assert columns["Obs"]["suggestion"]["target"] == "new_custom_field"
    assert columns["Obs"]["samples"] == [f"'=1+{i}" for i in range(5)]  # formula-safe, 5
    assert columns["Nome completo"]["target"] == "name"  # no mapping yet: the suggestion

    put = await http.put(f"/v1/imports/{job_id}/columns", json=MAPPING, headers=auth(bearer))
    assert put.status_code == 200, put.text
    mapped = by_header(put.json())
    assert put.json()["mapped"] is True
    assert mapped["Telefone com DDD"]["target"] == "whatsapp"
    assert mapped["Plano"]["target"] == "ignore"  # left out
    assert mapped["Obs"]["custom_field"] == {"id": None, "name": "Observação"}
    again = await http.get(f"/v1/imports/{job_id}/columns", headers=auth(bearer))
    assert by_header(again.json())["Telefone com DDD"]["target"] == "whatsapp"

    started = await http.post(f"/v1/imports/{job_id}/start", headers=auth(bearer))
    assert started.status_code == 202, started.text
    done = await wait_terminal(http, bearer, job_id)
    assert done["status"] == "completed_with_placeholders", done
    channels = await fetch(
        server.dsn,
        "SELECT DISTINCT channel_id FROM contact_details WHERE client_id = $1",
        client,
    )
    assert [r["channel_id"] for r in channels] == [2]  # whatsapp, as mapped
    fields = await fetch(
        server.dsn, "SELECT name FROM custom_field WHERE client_id = $1 ORDER BY id", client
    )
    assert [r["name"] for r in fields] == ["Plano", "Observação"]
    plano_values = await fetch(
        server.dsn,
        "SELECT count(*) AS n FROM contact_custom_fields WHERE custom_field_id = $1",
        plano,
    )
    assert plano_values[0]["n"] == 0  # ignored

    memory = await http.get("/v1/columns/memory", headers=auth(bearer))
    assert memory.status_code == 200
    learned = {e["header_key"]: (e["target"], e["uses"]) for e in memory.json()["items"]}
    assert learned == {
        "nome_completo": ("name", 1),
        "coluna_2": ("cpf_cnpj", 1),
        "telefone_com_ddd": ("whatsapp", 1),
        "obs": ("custom:Observação", 1),
        "plano": ("ignore", 1),  # left out
    }

    # The next file of the client: the memory comes first, its fields are existing ones now.
    second = await uploaded(http, bearer, csv_bytes(HEADER, rows(3200, 3)))
    remembered = by_header(
        (await http.get(f"/v1/imports/{second}/columns", headers=auth(bearer))).json()
    )
    phone = remembered["Telefone com DDD"]["suggestion"]
    assert (phone["target"], phone["reason"]) == ("whatsapp", "memory")
    obs = remembered["Obs"]["suggestion"]
    assert (obs["target"], obs["reason"]) == ("custom_field", "memory")
    assert obs["custom_field"]["name"] == "Observação"

    # Another tenant sees neither the job nor the memory.
    other = token(next(client_ids))
    hidden = await http.get(f"/v1/imports/{second}/columns", headers=auth(other))
    assert hidden.status_code == 404
    assert (await http.get("/v1/columns/memory", headers=auth(other))).json()["items"] == []

    forgotten = await http.delete("/v1/columns/memory", headers=auth(bearer))
    assert forgotten.json() == {"forgotten": 5}
    fresh = by_header(
        (await http.get(f"/v1/imports/{second}/columns", headers=auth(bearer))).json()
    )
    assert fresh["Telefone com DDD"]["suggestion"]["reason"] == "alias"


async def test_bad_mappings_are_refused_with_the_field_at_fault(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    bearer = token(client)
    job_id = await uploaded(http, bearer, csv_bytes(HEADER, rows(3300, 2)))
    path = f"/v1/imports/{job_id}/columns"

    twice = {"columns": [{"position": 0, "target": "name"}, {"position": 3, "target": "name"}]}
    refused = await http.put(path, json=twice, headers=auth(bearer))
    assert refused.status_code == 400
    assert refused.json() == [
        {"field": "columns.1.target", "message": "name is already mapped from column 0"}
    ]
    unknown = {"columns": [{"position": 1, "target": "cpf"}, {"position": 9, "target": "name"}]}
    refused = await http.put(path, json=unknown, headers=auth(bearer))
    assert refused.status_code == 400
    assert [p["field"] for p in refused.json()] == ["columns.0.target", "columns.1.position"]
    no_key = {"columns": [{"position": 0, "target": "name"}]}
    refused = await http.put(path, json=no_key, headers=auth(bearer))
    assert refused.status_code == 400
    assert refused.json() == [{"field": "columns", "message": "no cpf_cnpj column"}]

    elsewhere = await custom_field(server, next(client_ids), "Plano")
    foreign = {
        "columns": [
            {"position": 1, "target": "cpf_cnpj"},
            {"position": 3, "target": "custom_field", "custom_field_id": elsewhere},
        ]
    }
    refused = await http.put(path, json=foreign, headers=auth(bearer))
    assert refused.status_code == 404
    assert refused.json()["error"] == "custom_field_not_found"
    assert refused.json()["errors"] == [
        {
            "field": "columns.1.custom_field_id",
            "message": f"custom field {elsewhere} does not exist",
        }
    ]

    started = await http.post(f"/v1/imports/{job_id}/start", headers=auth(bearer))
    assert started.status_code == 202
    late = await http.put(path, json=MAPPING, headers=auth(bearer))
    assert late.status_code == 409
    assert late.json()["error"] == "import_already_started"
    assert [e["field"] for e in late.json()["errors"]] == ["columns"]
    await wait_terminal(http, bearer, job_id)


async def test_a_started_import_shows_its_columns_but_takes_no_mapping(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    created = await upload(http, bearer, csv_bytes(HEADER, rows(3400, 3)), preview="true")
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]
    # "Coluna 2" names no key column: without the columns step, the import fails.
    failed = await wait_terminal(http, bearer, job_id)
    assert failed["fail_reason"] == "missing_required_column"
    shown = await http.get(f"/v1/imports/{job_id}/columns", headers=auth(bearer))
    assert shown.status_code == 200, shown.text
    assert by_header(shown.json())["Nome completo"]["suggestion"]["target"] == "name"
    refused = await http.put(f"/v1/imports/{job_id}/columns", json=MAPPING, headers=auth(bearer))
    assert refused.status_code == 409


async def test_removing_or_undoing_an_import_takes_its_headers_out_of_the_memory(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    bearer = token(client)
    admin = token(client, "owner", (CREATE, ADMIN))
    first, second = [
        await uploaded(http, bearer, csv_bytes(HEADER, rows(start, 2))) for start in (3500, 3600)
    ]
    for job_id in (first, second):
        put = await http.put(f"/v1/imports/{job_id}/columns", json=MAPPING, headers=auth(bearer))
        assert put.status_code == 200, put.text
        await http.post(f"/v1/imports/{job_id}/start", headers=auth(bearer))
        assert (await wait_terminal(http, bearer, job_id))["status"].startswith("completed")

    async def uses() -> dict[str, int]:
        items = (await http.get("/v1/columns/memory", headers=auth(bearer))).json()["items"]
        return {e["header_key"]: e["uses"] for e in items}

    assert (await uses())["telefone_com_ddd"] == 2
    removed = await http.delete(f"/v1/imports/{first}/data", headers=auth(admin))
    assert removed.status_code == 200, removed.text
    assert (await uses())["telefone_com_ddd"] == 1
    again = await http.delete(f"/v1/imports/{first}/data", headers=auth(admin))
    assert again.status_code == 200
    assert (await uses())["telefone_com_ddd"] == 1  # a repeat takes nothing more
    undone = await http.post(f"/v1/imports/{second}/undo", headers=auth(admin))
    assert undone.status_code == 200, undone.text
    assert await uses() == {}  # an undone import is taken back out too


async def test_a_multipart_upload_with_start_false_waits_for_its_columns_step(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    created = await upload(http, bearer, csv_bytes(HEADER, rows(3700, 3)), start="false")
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    assert created.json()["status"] == "uploaded"
    put = await http.put(f"/v1/imports/{job_id}/columns", json=MAPPING, headers=auth(bearer))
    assert put.status_code == 200, put.text
    started = await http.post(f"/v1/imports/{job_id}/start", headers=auth(bearer))
    assert started.status_code == 202
    done = await wait_terminal(http, bearer, job_id)
    assert counters_of(done)["inserted"] == 3
    bad = await upload(http, bearer, csv_bytes(HEADER, rows(3800, 1)), start="later")
    assert bad.status_code == 400
    assert bad.json() == [{"field": "start", "message": "must be true or false"}]


def counters_of(job: dict[str, object]) -> dict[str, int]:
    counters = job["counters"]
    assert isinstance(counters, dict)
    return counters
