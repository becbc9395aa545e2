"""Completion webhooks through `importer serve`: a notify_url the SSRF rules refuse is a 400 on
the field (no job is created); with IMPORTER_WEBHOOK_ALLOW_PRIVATE a server without RabbitMQ
delivers the finished import's document, signed, to a receiver on 127.0.0.1; the owner's
`importer client webhook` sets the secret and default, checked the same way."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from importer.core.webhooks import signature_matches
from tests.api.conftest import IMPORTER, Server, start_server, stop_server
from tests.api.support import ADMIN, CREATE, auth, csv_bytes, token, upload, wait_terminal
from tests.webhook_receiver import receiving

pytestmark = pytest.mark.api

CPF = "52998224725"


def client_webhook(dsn: str, *args: str, allow_private: bool) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "DATABASE_URL": dsn}
    environ.pop("IMPORTER_WEBHOOK_ALLOW_PRIVATE", None)
    if allow_private:
        environ["IMPORTER_WEBHOOK_ALLOW_PRIVATE"] = "1"
    return subprocess.run(
        [str(IMPORTER), "client", "webhook", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def metrics_after(http: httpx.AsyncClient, series: str) -> str:
    """/metrics once ``series`` shows (the attempt's record and its count follow its answer)."""
    deadline = time.monotonic() + 30
    while series not in (text := (await http.get("/metrics")).text):
        assert time.monotonic() < deadline, text
        await asyncio.sleep(0.05)
    return text


@pytest.mark.parametrize(
    ("notify_url", "message"),
    [
        ("http://127.0.0.1:9/hooks", "https"),
        ("https://127.0.0.1/hooks", "loopback"),
        ("https://localhost/hooks", "loopback"),  # resolved, every address checked
        ("https://10.0.0.8/hooks", "private"),
        ("https://169.254.169.254/latest/meta-data", "link-local"),
        ("https://[::1]/hooks", "loopback"),
        ("not a url", "spaces"),
    ],
)
async def test_a_private_or_plain_http_notify_url_is_refused_400(
    local_server: Server, notify_url: str, message: str
) -> None:
    async with httpx.AsyncClient(base_url=local_server.url, timeout=20) as http:
        bearer = token(8101)
        response = await upload(http, bearer, b"cpf\n1\n", notify_url=notify_url)
        assert response.status_code == 400, response.text
        [problem] = response.json()
        assert problem["field"] == "notify_url"
        assert message in problem["message"]
        listed = await http.get("/v1/imports", headers=auth(token(8101)))
        assert listed.json()["items"] == []


async def test_the_json_create_refuses_it_too(local_server: Server) -> None:
    async with httpx.AsyncClient(base_url=local_server.url, timeout=20) as http:
        body = {
            "key": "8102/x/contacts.csv",
            "size": 5,
            "sha256": "0" * 64,
            "conflict_strategy": "merge",
            "has_sensitive_data": False,
            "has_underage_data": False,
            "data_processing_purpose": "crm",
            "lgpd_processing_hypothesis": 1,
            "notify_url": "https://192.168.0.1/hooks",
        }
        response = await http.post("/v1/imports", json=body, headers=auth(token(8102)))
    assert response.status_code == 400, response.text
    assert {p["field"] for p in response.json()} == {"notify_url"}


@pytest.fixture
def private_server(db_dsn: str, tmp_path: Path) -> Iterator[Server]:
    """A server that accepts private targets (no broker: the delivery runs anyway)."""
    running = start_server(
        db_dsn,
        tmp_path / "serve.log",
        IMPORTER_STORAGE_DIR=str(tmp_path / "objects"),
        IMPORTER_WEBHOOK_ALLOW_PRIVATE="1",
        IMPORTER_WEBHOOK_RETRY_DELAY_S="0.1",
        IMPORTER_WEBHOOK_TIMEOUT_S="2",
        RABBITMQ_URL="",
    )
    try:
        yield running
    finally:
        stop_server(running)


async def test_serve_without_a_broker_delivers_the_signed_document(
    private_server: Server,
) -> None:
    client = 8103
    bearer = token(client)
    async with (
        httpx.AsyncClient(base_url=private_server.url, timeout=20) as http,
        receiving([500, 200]) as receiver,
    ):
        content = csv_bytes(["nome", "cpf"], [["Ana", CPF]])
        no_secret = await upload(http, bearer, content, notify_url=receiver.url())
        assert no_secret.status_code == 400
        assert "no webhook secret" in no_secret.json()[0]["message"]

        refused = client_webhook(
            private_server.dsn,
            "--client-id",
            str(client),
            "--url",
            receiver.url(),
            allow_private=False,
        )
        assert refused.returncode == 1
        assert "notify_url" in refused.stderr
        made = client_webhook(private_server.dsn, "--client-id", str(client), allow_private=True)
        assert made.returncode == 0, made.stderr
        secret = orjson.loads(made.stdout)["secret"]
        assert len(secret) == 64

        created = await upload(http, bearer, content, notify_url=receiver.url())
        assert created.status_code in (201, 202), created.text
        job_id = created.json()["id"]
        job = await wait_terminal(http, bearer, job_id)
        requests = await receiver.requests_at_least(2)
        metrics = await metrics_after(http, 'webhook_attempts_total{outcome="delivered"} 1.0')
    assert [r.headers["x-importer-delivery"] for r in requests] == [f"notification:{job_id}"] * 2
    assert requests[0].body == requests[1].body
    assert signature_matches(requests[1].body, secret, requests[1].headers["x-importer-signature"])
    assert 'importer_webhook_attempts_total{outcome="retry"} 1.0' in metrics
    assert 'importer_webhook_attempts_total{outcome="delivered"} 1.0' in metrics
    sent = orjson.loads(requests[1].body)
    assert (sent["id"], sent["status"], sent["counters"]) == (
        job_id,
        job["status"],
        job["counters"],
    )


async def test_the_admin_sets_the_client_s_webhook_over_http(local_server: Server) -> None:
    client = 8104
    admin = auth(token(client, permissions=(ADMIN,)))
    async with httpx.AsyncClient(base_url=local_server.url, timeout=20) as http:
        plain = await http.put(
            "/v1/admin/webhook", json={}, headers=auth(token(client, permissions=(CREATE,)))
        )
        assert plain.status_code == 403
        unset = await http.get("/v1/admin/webhook", headers=admin)
        assert unset.json() == {"client_id": client, "notify_url": None, "secret_set": False}

        private = await http.put(
            "/v1/admin/webhook", json={"notify_url": "https://10.1.1.1/x"}, headers=admin
        )
        assert private.status_code == 400
        assert [p["field"] for p in private.json()] == ["notify_url"]
        wrong = await http.put(
            "/v1/admin/webhook",
            json={"secret": "short", "new_secret": "yes", "colour": 1},
            headers=admin,
        )
        assert wrong.status_code == 400
        assert {p["field"] for p in wrong.json()} == {"colour", "new_secret"}
        short = await http.put("/v1/admin/webhook", json={"secret": "short"}, headers=admin)
        assert short.status_code == 400
        assert short.json()[0]["field"] == "secret"

        made = await http.put("/v1/admin/webhook", json={}, headers=admin)
        assert made.status_code == 200, made.text
        first = made.json()["secret"]
        assert len(first) == 64
        kept = await http.put("/v1/admin/webhook", json={}, headers=admin)
        assert kept.json()["secret"] == first
        rotated = await http.put("/v1/admin/webhook", json={"new_secret": True}, headers=admin)
        assert rotated.json()["secret"] not in (first, None)
        shown = await http.get("/v1/admin/webhook", headers=admin)
        assert shown.json() == {"client_id": client, "notify_url": None, "secret_set": True}
