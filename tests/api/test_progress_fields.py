"""What the status document and the event stream say of a running import: the phase, the rows
per second of the last few seconds, the ETA, and a queued job's place in the claim's order.

A server of its own, whose failpoints make each phase last: chunk 0's batches wait 1.5 s
before their transaction (``reading``), every batch pauses after its commit (``applying``), and
the finalization waits 1.5 s once every batch is in (``finalizing``).
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.api.conftest import Server, start_server, stop_server
from tests.api.support import TERMINAL, auth, csv_bytes, token, upload, wait_terminal
from tests.conftest import _admin, dsn_for
from tests.jobs_support import eventually
from tests.support import cpf, fetch

pytestmark = pytest.mark.api

HEADER = ("nome", "cpf", "email", "telefone")
PHASE_SLEEP_MS = 1500
FAILPOINTS = (
    f"chunk:0=sleep:{PHASE_SLEEP_MS},after_commit=sleep:10,before_finalize=sleep:{PHASE_SLEEP_MS}"
)


@pytest.fixture(scope="module")
async def slow_db(template_db: str) -> AsyncIterator[str]:
    name = f"importer_api_{uuid.uuid4().hex[:10]}"
    await _admin(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    yield dsn_for(name)
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def slow_server(slow_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("api-phases")
    running = start_server(
        slow_db,
        base / "serve.log",
        IMPORTER_STORAGE_DIR=str(base / "objects"),
        IMPORTER_FAILPOINTS=FAILPOINTS,
    )
    try:
        yield running
    finally:
        stop_server(running)


@pytest.fixture
async def slow_http(slow_server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=slow_server.url, timeout=20) as client:
        yield client


async def events(http: httpx.AsyncClient, bearer: str, job_id: str) -> list[dict[str, Any]]:
    """The documents of the job's event stream, to its end."""
    async with (
        asyncio.timeout(60),
        http.stream("GET", f"/v1/imports/{job_id}/events", headers=auth(bearer)) as stream,
    ):
        assert stream.status_code == 200
        documents: list[dict[str, Any]] = [
            orjson.loads(line.removeprefix("data: "))
            async for line in stream.aiter_lines()
            if line.startswith("data: ")
        ]
    return documents


def phases(documents: list[dict[str, Any]]) -> list[object]:
    """The phases in the order they came, repeats folded."""
    seen = [document["phase"] for document in documents]
    return [phase for i, phase in enumerate(seen) if i == 0 or seen[i - 1] != phase]


async def job(http: httpx.AsyncClient, bearer: str, job_id: str) -> dict[str, Any]:
    response = await http.get(f"/v1/imports/{job_id}", headers=auth(bearer))
    assert response.status_code == 200, response.text
    document: dict[str, Any] = response.json()
    return document


async def test_the_stream_shows_the_phases_the_rate_and_the_eta(
    slow_http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    rows = [(f"N{i}", cpf(40_000 + i), "", "") for i in range(120)]
    created = (await upload(slow_http, bearer, csv_bytes(HEADER, rows))).json()
    assert (created["phase"], created["progress"]["rows_per_s"], created["eta_s"]) == (
        None,
        None,
        None,
    )
    documents = await events(slow_http, bearer, str(created["id"]))

    assert phases(documents)[-3:] == ["applying", "finalizing", None]
    assert "reading" in phases(documents)
    assert phases(documents).index("reading") < phases(documents).index("applying")
    by_phase: dict[object, list[dict[str, Any]]] = {}
    for document in documents:
        by_phase.setdefault(document["phase"], []).append(document)
    for reading in by_phase["reading"]:  # nothing committed yet: no rate, no ETA
        assert reading["status"] in ("normalizing", "importing")
        assert reading["counters"]["rows_read"] == 0
        assert reading["eta_s"] is None
    applying = by_phase["applying"]
    assert any(d["progress"]["rows_per_s"] > 0 for d in applying)
    etas = [d["eta_s"] for d in applying if d["eta_s"] is not None]
    assert etas
    assert all(isinstance(eta, float) and eta >= 0 for eta in etas)
    for finalizing in by_phase["finalizing"]:  # the file is read: the last batches, then the end
        assert finalizing["status"] == "importing"
    last = by_phase["finalizing"][-1]["progress"]
    assert last["bytes"] == last["bytes_total"]
    ended = documents[-1]
    assert ended["status"] in TERMINAL
    assert (ended["phase"], ended["progress"]["rows_per_s"], ended["eta_s"]) == (None, None, None)


async def test_queue_position_puts_a_busy_client_s_job_after_another_client_s(
    slow_http: httpx.AsyncClient, slow_server: Server, client_ids: itertools.count[int]
) -> None:
    """Two workers, at most two imports per client: X's first runs, its second is claimed and
    waits for X's turn (no place in the queue), its third waits; Y's first goes before it."""
    x, y = next(client_ids), next(client_ids)
    x_bearer, y_bearer = token(x), token(y)
    tiny = csv_bytes(HEADER, [("T", cpf(50_000), "", "")])
    rows = [(f"N{i}", cpf(60_000 + i), "", "") for i in range(200)]
    first = (await upload(slow_http, x_bearer, csv_bytes(HEADER, rows))).json()["id"]
    second = (await upload(slow_http, x_bearer, tiny)).json()["id"]

    async def second_claimed() -> bool | None:
        found = await fetch(
            slow_server.dsn,
            "SELECT lease_expires_at > now() AS leased FROM import_job WHERE id = $1",
            uuid.UUID(second),
        )
        return found[0]["leased"] or None

    await eventually(second_claimed)
    third = (await upload(slow_http, x_bearer, tiny)).json()["id"]
    other = (await upload(slow_http, y_bearer, tiny)).json()["id"]
    shown = {
        name: await job(slow_http, bearer, job_id)
        for name, bearer, job_id in (
            ("first", x_bearer, first),
            ("second", x_bearer, second),
            ("third", x_bearer, third),
            ("other", y_bearer, other),
        )
    }
    assert shown["first"]["status"] not in ("queued", *TERMINAL)
    assert shown["first"]["queue_position"] is None
    assert (shown["second"]["status"], shown["second"]["queue_position"]) == ("queued", None)
    assert (shown["other"]["status"], shown["other"]["queue_position"]) == ("queued", 1)
    assert (shown["third"]["status"], shown["third"]["queue_position"]) == ("queued", 2)
    listed = (await slow_http.get("/v1/imports", headers=auth(x_bearer))).json()["items"]
    assert {item["id"]: item["queue_position"] for item in listed}[third] == 2

    for bearer, job_id in ((y_bearer, other), (x_bearer, third), (x_bearer, second)):
        cancelled = await slow_http.post(f"/v1/imports/{job_id}/cancel", headers=auth(bearer))
        assert cancelled.status_code == 202, cancelled.text
    assert (await job(slow_http, y_bearer, other))["queue_position"] is None
    for job_id in (first, second, third):
        assert (await wait_terminal(slow_http, x_bearer, job_id))["queue_position"] is None
