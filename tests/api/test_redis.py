"""`importer serve` with REDIS_URL pointing at a redis-server of this module's own: the creation
rate limit answers 429 with Retry-After, and fails open once Redis is killed; readiness reports
Redis without failing on it; SSE progress reaches `done` with Redis killed mid-import."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import orjson
import pytest

from tests.api.conftest import Server, _database, start_server, stop_server
from tests.api.support import auth, counters, csv_bytes, token, upload, wait_terminal
from tests.conftest import _admin, dsn_for
from tests.redis_support import RedisServer, redis_server
from tests.support import cpf

pytestmark = [pytest.mark.api, pytest.mark.timeout(120)]

HEADER = ("nome", "cpf", "email", "telefone")
RATE_LIMIT = 3
# Rows of the SSE test's file: with the tier's chunks of 2, seconds of batches (under 64 KiB).
SSE_ROWS = 2_000
RUNNING = ("normalizing", "importing")


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(scope="module")
async def redis_db(template_db: str) -> AsyncIterator[str]:
    name = await _database(template_db)
    yield dsn_for(name)
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def redis_server_app(
    redis_db: str, redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The server on its own database and storage, with Redis and a rate limit of 3/min."""
    base = tmp_path_factory.mktemp("api-redis")
    running = start_server(
        redis_db,
        base / "serve.log",
        IMPORTER_STORAGE_DIR=str(base / "objects"),
        REDIS_URL=redis.url,
        IMPORTER_RATE_LIMIT_PER_MINUTE=str(RATE_LIMIT),
    )
    try:
        yield running
    finally:
        stop_server(running)


@pytest.fixture
async def http(redis_server_app: Server, redis: RedisServer) -> AsyncIterator[httpx.AsyncClient]:
    if redis.process is None:  # a test before this one killed it
        redis.start()
    async with httpx.AsyncClient(base_url=redis_server_app.url, timeout=20) as client:
        yield client


def _rows(count: int, first: int) -> bytes:
    return csv_bytes(HEADER, [(f"N{i}", cpf(first + i), "", "") for i in range(count)])


async def _inside_one_window() -> None:
    """The limit counts per wall-clock minute: start the burst well inside one."""
    if time.time() % 60 > 50:
        await asyncio.sleep(60 - time.time() % 60 + 0.1)


async def test_creations_beyond_the_limit_get_429_then_pass_once_redis_is_gone(
    http: httpx.AsyncClient, redis: RedisServer, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    await _inside_one_window()
    for n in range(RATE_LIMIT):
        response = await upload(http, bearer, _rows(2, 100 + 10 * n))
        assert response.status_code == 202, response.text
    refused = await upload(http, bearer, _rows(2, 200))
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"] == "rate_limited"
    assert refused.json()["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    announce = {"filename": "c.csv", "size": 10, "sha256": "0" * 64, "conflict_strategy": "merge"}
    announced = await http.post("/v1/uploads", json=announce, headers=auth(bearer))
    assert announced.status_code == 429  # the upload-URL creation counts too
    other = await upload(http, token(next(client_ids)), _rows(2, 300))
    assert other.status_code == 202  # another client has its own budget

    redis.kill()
    started = time.monotonic()
    passed = await upload(http, bearer, _rows(2, 400))
    assert passed.status_code == 202, passed.text  # fail open
    assert time.monotonic() - started < 5.0
    job = await wait_terminal(http, bearer, passed.json()["id"])
    assert job["status"] == "completed"
    ready = await http.get("/readyz")
    assert ready.status_code == 200, ready.text  # Redis is optional
    assert ready.json()["status"] == "degraded"
    assert ready.json()["checks"]["redis"] == "unavailable"

    redis.start()
    ready = await http.get("/readyz")
    assert (ready.json()["status"], ready.json()["checks"]["redis"]) == ("ready", "ok")


async def test_sse_reaches_done_with_redis_killed_mid_import(
    http: httpx.AsyncClient, redis: RedisServer, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    created = await upload(http, bearer, _rows(SSE_ROWS, 1_000))
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]
    events: list[tuple[str, dict[str, object]]] = []
    killed_at_rows: int | None = None
    async with (
        asyncio.timeout(60),
        http.stream("GET", f"/v1/imports/{job_id}/events", headers=auth(bearer)) as stream,
    ):
        assert stream.status_code == 200
        event = ""
        async for line in stream.aiter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                document = orjson.loads(line.removeprefix("data: "))
                events.append((event, document))
                rows = counters(document)["rows_read"]
                if killed_at_rows is None and document["status"] in RUNNING:
                    redis.kill()  # mid-import: the stream goes on at the poll cadence
                    killed_at_rows = rows
    assert killed_at_rows is not None, events
    print(f"redis killed at {killed_at_rows} rows; {len(events)} events")
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "done"
    assert kinds.count("done") == 1
    final = events[-1][1]
    assert final["status"] == "completed"
    assert counters(final)["rows_read"] == SSE_ROWS > killed_at_rows
    progress_after_kill = [d for k, d in events if k == "progress" and d is not final]
    assert len(progress_after_kill) >= 2  # progress kept coming, not only the end
    job = (await http.get(f"/v1/imports/{job_id}", headers=auth(bearer))).json()
    assert counters(final) == counters(job)  # what the stream said is the database's truth
