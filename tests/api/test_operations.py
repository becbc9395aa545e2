"""Layouts, health, readiness, metrics and the OpenAPI document."""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from pathlib import Path

import httpx
import orjson
import pytest

from tests.api.conftest import start_server
from tests.api.support import LGPD, auth, counters, csv_bytes, token, upload, wait_terminal
from tests.support import cpf

pytestmark = pytest.mark.api

LAYOUT = {
    "delimiter": ";",
    "columns": {"Identificador": "cpf_cnpj", "Zap": "whatsapp", "Cliente": "name"},
    "unmapped": "ignore",
}


async def test_layout_crud_and_import_with_a_stored_layout(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    client = next(client_ids)
    bearer = token(client)
    created = await http.post(
        "/v1/layouts", json={"name": "Semicolons", "document": LAYOUT}, headers=auth(bearer)
    )
    assert created.status_code == 201, created.text
    layout = created.json()
    assert layout["document"] == LAYOUT
    one = await http.get(f"/v1/layouts/{layout['id']}", headers=auth(bearer))
    assert one.json() == layout
    listed = await http.get("/v1/layouts", headers=auth(bearer))
    assert [item["id"] for item in listed.json()["items"]] == [layout["id"]]
    invalid = await http.put(
        f"/v1/layouts/{layout['id']}",
        json={"name": "x", "document": {"columns": {"a": "telepathy"}}},
        headers=auth(bearer),
    )
    assert invalid.status_code == 400
    assert invalid.json()[0]["field"] == "document.columns.a"
    renamed = await http.put(
        f"/v1/layouts/{layout['id']}",
        json={"name": "Renamed", "document": LAYOUT},
        headers=auth(bearer),
    )
    assert renamed.status_code == 200
    assert renamed.json()["name"] == "Renamed"
    content = f"Cliente;Identificador;Zap;Extra\nAna;{cpf(1600)};11987654321;x\n".encode()
    response = await upload(http, bearer, content, layout_id=str(layout["id"]))
    assert response.status_code == 202, response.text
    job = await wait_terminal(http, bearer, response.json()["id"])
    assert job["status"] == "completed"  # "Extra" ignored: no placeholder field was created
    assert counters(job)["inserted"] == 1
    other = await http.get(f"/v1/layouts/{layout['id']}", headers=auth(token(next(client_ids))))
    assert other.status_code == 404
    foreign = await upload(http, token(next(client_ids)), content, layout_id=str(layout["id"]))
    assert foreign.status_code == 400
    assert foreign.json() == [{"field": "layout_id", "message": "no such layout"}]
    deleted = await http.delete(f"/v1/layouts/{layout['id']}", headers=auth(bearer))
    assert deleted.status_code == 204
    gone = await http.get(f"/v1/layouts/{layout['id']}", headers=auth(bearer))
    assert gone.status_code == 404
    assert (await http.get(f"/v1/imports/{job['id']}", headers=auth(bearer))).status_code == 200


async def test_inline_layout_and_unknown_journey(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    content = f"Cliente;Identificador;Zap;Extra\nBia;{cpf(1610)};;y\n".encode()
    response = await upload(http, bearer, content, layout=orjson.dumps(LAYOUT).decode())
    assert response.status_code == 202, response.text
    job = await wait_terminal(http, bearer, response.json()["id"])
    assert counters(job)["inserted"] == 1
    journey = await upload(
        http, bearer, content, journey_id="424242", auto_start_journey_mailing="true"
    )
    assert journey.status_code == 400
    assert journey.json() == [{"field": "journey_id", "message": "no such journey"}]


async def test_health_readiness_and_metrics(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    assert (await http.get("/healthz")).json() == {"status": "ok"}
    ready = await http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "storage": "ok", "workers": "ok"}
    bearer = token(next(client_ids))
    content = csv_bytes(("nome", "cpf"), [("M", cpf(1700))])
    job_id = (await upload(http, bearer, content)).json()["id"]
    await wait_terminal(http, bearer, job_id)
    metrics = await http.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    assert 'importer_imports_created_total{source="multipart"}' in text
    assert 'importer_http_requests_total{method="POST",route="/v1/imports",status="202"}' in text
    assert 'route="/v1/imports/{job_id}"' in text  # the template, never the id
    assert job_id not in text
    assert "importer_workers_running 2.0" in text


EXPECTED_ROUTES = {
    ("post", "/v1/imports"),
    ("get", "/v1/imports"),
    ("get", "/v1/imports/{job_id}"),
    ("post", "/v1/imports/{job_id}/start"),
    ("post", "/v1/imports/{job_id}/apply"),
    ("post", "/v1/imports/{job_id}/uploaded"),
    ("post", "/v1/imports/{job_id}/cancel"),
    ("get", "/v1/imports/{job_id}/events"),
    ("get", "/v1/imports/{job_id}/errors"),
    ("get", "/v1/imports/{job_id}/duplicates"),
    ("post", "/v1/uploads"),
    ("put", "/v1/uploads/{job_id}"),
    ("post", "/v1/hsm/intents/import"),
    ("post", "/v1/layouts"),
    ("get", "/v1/layouts"),
    ("get", "/v1/layouts/{layout_id}"),
    ("put", "/v1/layouts/{layout_id}"),
    ("delete", "/v1/layouts/{layout_id}"),
    ("get", "/v1/imports/{job_id}/columns"),
    ("put", "/v1/imports/{job_id}/columns"),
    ("get", "/v1/columns/memory"),
    ("delete", "/v1/columns/memory"),
    ("post", "/v1/imports/{job_id}/requeue"),
    ("post", "/v1/imports/{job_id}/undo"),
    ("get", "/v1/admin/webhook"),
    ("put", "/v1/admin/webhook"),
    ("delete", "/v1/imports/{job_id}/data"),
    ("get", "/v1/admin/dead-letters"),
    ("post", "/v1/admin/dead-letters/replay"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
}


async def test_openapi_lists_every_route_with_bodies_and_errors(http: httpx.AsyncClient) -> None:
    schema = (await http.get("/openapi.json")).json()
    routes = {(m, p) for p, ops in schema["paths"].items() for m in ops}
    assert routes == EXPECTED_ROUTES
    create = schema["paths"]["/v1/imports"]["post"]
    assert set(create["requestBody"]["content"]) == {"multipart/form-data", "application/json"}
    form = create["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert {"file", "conflict_strategy", "layout", "journey_id"} <= set(form["properties"])
    for path, operations in schema["paths"].items():
        if path.startswith("/v1/"):
            for method, operation in operations.items():
                assert {"400", "401", "403"} <= set(operation["responses"]), (method, path)
                assert operation.get("security"), (method, path)
    docs = await http.get("/docs")
    assert docs.status_code == 200
    assert "swagger" in docs.text.lower()


async def test_sigterm_ends_event_streams_drains_and_exits_0(
    db_dsn: str, tmp_path: Path, client_ids: itertools.count[int]
) -> None:
    """An open event stream does not hold the shutdown: SIGTERM ends it, the server exits 0."""
    server = start_server(db_dsn, tmp_path / "serve.log", IMPORTER_STORAGE_DIR=str(tmp_path))
    try:
        bearer = token(next(client_ids))
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
            announced = {"filename": "a.csv", "size": 10, "sha256": "0" * 64}
            created = await http.post(
                "/v1/uploads",
                json={**announced, "conflict_strategy": "merge", **LGPD},
                headers=auth(bearer),
            )
            job_id = created.json()["job"]["id"]  # uploading: its stream would never end
            async with http.stream(
                "GET", f"/v1/imports/{job_id}/events", headers=auth(bearer)
            ) as stream:
                lines = stream.aiter_lines()
                assert await anext(lines) == "event: progress"
                started = time.monotonic()
                server.process.send_signal(signal.SIGTERM)
                async with asyncio.timeout(10):
                    rest = [line async for line in lines]
        assert "event: done" not in rest
        assert server.process.wait(timeout=10) == 0, server.output()
        assert time.monotonic() - started < 10
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()
