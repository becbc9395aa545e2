"""The owner's operations over HTTP: requeue, removal of an import's data, and the dead-letter
queue (on a server of its own with RabbitMQ: the session server has no broker)."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import httpx
import pytest

from importer.adapters.rabbit import broker
from importer.core import codec
from importer.core.models import Batch, ContactRow
from importer.settings import Settings
from importer.wiring import broker_topology
from tests.api.conftest import Server, start_server, stop_server
from tests.api.support import (
    ADMIN,
    CREATE,
    LGPD,
    auth,
    counters,
    csv_bytes,
    sha256,
    token,
    upload,
    wait_terminal,
)
from tests.conftest import _admin, dsn_for
from tests.support import cpf, db_state, fetch

pytestmark = pytest.mark.api

RABBITMQ_URL = os.environ.get("RABBITMQ_TEST_URL", "amqp://guest:guest@127.0.0.1:5672/")
HEADER = ("nome", "cpf", "email")
WAIT_S = 30.0


def assert_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"] == code, response.text


async def notifications(dsn: str, job_id: str) -> list[tuple[str, str]]:
    rows = await fetch(
        dsn,
        "SELECT message_id, payload->>'type' AS type FROM outbox"
        " WHERE topic = 'notification' AND payload->>'job_id' = $1 ORDER BY id",
        job_id,
    )
    return [(r["message_id"], r["type"]) for r in rows]


async def finalizations(dsn: str, job_id: str) -> int:
    rows = await fetch(
        dsn, "SELECT count(*) AS n FROM import_batch_finalized WHERE batch_id = $1::uuid", job_id
    )
    return int(rows[0]["n"])


async def test_owner_operations_need_import_admin(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    plain = auth(token(next(client_ids), permissions=[CREATE]))
    job = uuid.uuid4()
    assert_error(await http.post(f"/v1/imports/{job}/requeue", headers=plain), 403, "forbidden")
    assert_error(await http.delete(f"/v1/imports/{job}/data", headers=plain), 403, "forbidden")
    assert_error(await http.get("/v1/admin/dead-letters", headers=plain), 403, "forbidden")
    replay = await http.post("/v1/admin/dead-letters/replay", headers=plain)
    assert_error(replay, 403, "forbidden")


async def test_without_a_broker_the_dead_letter_routes_answer_no_broker(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    admin = auth(token(next(client_ids), permissions=[ADMIN]))
    assert_error(await http.get("/v1/admin/dead-letters", headers=admin), 409, "no_broker")
    replay = await http.post("/v1/admin/dead-letters/replay", headers=admin)
    assert_error(replay, 409, "no_broker")
    bad = await http.get("/v1/admin/dead-letters", params={"limit": 0}, headers=admin)
    assert bad.status_code == 400


async def test_remove_data_then_requeue_gives_the_same_state_and_one_notice_per_run(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    client, intruder = next(client_ids), next(client_ids)
    owner = token(client, permissions=[CREATE, ADMIN])
    rows = [(f"R{i}", cpf(2600 + i), f"r{i}@example.com.br") for i in range(7)]
    content = csv_bytes(HEADER, [*rows, ("Bad", "123", "")])
    job_id = (await upload(http, owner, content)).json()["id"]
    first = await wait_terminal(http, owner, job_id)
    assert first["status"] == "completed"
    state = await db_state(server.dsn, client)
    assert len(state) == 7

    early = await http.post(f"/v1/imports/{job_id}/requeue", headers=auth(owner))
    assert_error(early, 409, "import_already_applied")  # the one-time gate: remove data first
    foreign = auth(token(intruder, permissions=[ADMIN]))
    assert (await http.delete(f"/v1/imports/{job_id}/data", headers=foreign)).status_code == 404
    assert (await http.post(f"/v1/imports/{job_id}/requeue", headers=foreign)).status_code == 404

    removed = await http.delete(f"/v1/imports/{job_id}/data", headers=auth(owner))
    assert removed.status_code == 200, removed.text
    counts = removed.json()["removed"]
    assert (counts["contacts"], counts["details"], counts["row_errors"]) == (7, 7, 1)
    assert removed.json()["job"]["status"] == "completed"  # the history stays
    assert await db_state(server.dsn, client) == {}
    again = (await http.delete(f"/v1/imports/{job_id}/data", headers=auth(owner))).json()
    assert [again["removed"][k] for k in ("contacts", "details", "chunks", "row_errors")] == [
        0,
        0,
        0,
        0,
    ]

    requeued = await http.post(f"/v1/imports/{job_id}/requeue", headers=auth(owner))
    assert requeued.status_code == 202, requeued.text
    assert requeued.json()["run"] == 2
    assert requeued.json()["job"]["status"] in ("queued", "normalizing", "importing", "completed")
    second = await wait_terminal(http, owner, job_id)
    assert second["status"] == first["status"]
    assert counters(second) == counters(first)
    assert await db_state(server.dsn, client) == state
    assert await finalizations(server.dsn, job_id) == 1
    assert await notifications(server.dsn, job_id) == [
        (f"notification:{job_id}", "import_partial"),
        (f"notification:{job_id}:2", "import_partial"),
    ]


async def test_a_cancelled_import_requeued_runs_its_stored_file(
    http: httpx.AsyncClient, server: Server, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids), permissions=[CREATE, ADMIN])
    content = csv_bytes(HEADER, [(f"C{i}", cpf(2700 + i), "") for i in range(4)])
    announce = {"filename": "c.csv", "size": len(content), "sha256": sha256(content)}
    created = await http.post(
        "/v1/uploads", json={**announce, "conflict_strategy": "merge", **LGPD}, headers=auth(bearer)
    )
    job, target = created.json()["job"], created.json()["upload"]
    async with httpx.AsyncClient(timeout=20) as direct:
        assert (await direct.put(target["url"], content=content)).status_code == 200
    confirmed = await http.post(f"/v1/imports/{job['id']}/uploaded", headers=auth(bearer))
    assert confirmed.json()["status"] == "uploaded"
    cancelled = await http.post(f"/v1/imports/{job['id']}/cancel", headers=auth(bearer))
    assert cancelled.json()["status"] == "cancelled"
    started = await http.post(f"/v1/imports/{job['id']}/start", headers=auth(bearer))
    assert_error(started, 409, "import_already_applied")  # a user's start never requeues

    requeued = await http.post(f"/v1/imports/{job['id']}/requeue", headers=auth(bearer))
    assert requeued.status_code == 202, requeued.text
    done = await wait_terminal(http, bearer, job["id"])
    assert done["status"] == "completed"
    assert counters(done)["inserted"] == 4
    assert done["fail_reason"] is None
    assert await notifications(server.dsn, job["id"]) == [
        (f"notification:{job['id']}", "import_cancelled"),
        (f"notification:{job['id']}:2", "import_done"),
    ]
    running = await http.post(f"/v1/imports/{job['id']}/requeue", headers=auth(bearer))
    assert_error(running, 409, "import_already_applied")


# --- dead letters: a server with RabbitMQ -----------------------------------------------------


@pytest.fixture
async def broker_db(template_db: str) -> AsyncIterator[str]:
    name = f"importer_dlq_{uuid.uuid4().hex[:10]}"
    await _admin(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    yield dsn_for(name)
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def broker_server(broker_db: str, tmp_path: Path) -> AsyncIterator[Server]:
    prefix = f"test-dlq-{uuid.uuid4().hex[:10]}/"
    running = start_server(
        broker_db,
        tmp_path / "serve.log",
        IMPORTER_STORAGE_DIR=str(tmp_path / "objects"),
        RABBITMQ_URL=RABBITMQ_URL,
        IMPORTER_QUEUE_PREFIX=prefix,
    )
    try:
        yield running
    finally:
        stop_server(running)
        await _delete_queues(topology_of(running))


def topology_of(server: Server) -> broker.Topology:
    return broker_topology(Settings(queue_prefix=server.env["IMPORTER_QUEUE_PREFIX"]))


async def _delete_queues(topology: broker.Topology) -> None:
    connection = await aio_pika.connect(RABBITMQ_URL)
    try:
        channel = await connection.channel()
        for name in topology.queue_arguments():
            await channel.queue_delete(name)
    finally:
        await connection.close()


async def running_job(dsn: str, client: int) -> uuid.UUID:
    """A job importing under a live lease of a worker that is gone (no instance claims it
    before the lease ends), its lane open at chunk 0."""
    job_id = uuid.uuid4()
    await fetch(
        dsn,
        "INSERT INTO import_job (id, client_id, user_id, status, source, input_format,"
        " conflict_strategy, chunk_size, partitions, lease_owner, lease_expires_at)"
        " VALUES ($1, $2, 'ana', 'importing', 'x.csv', 'csv', 'merge', 2, 1, 'gone',"
        " now() + interval '1 hour')",
        job_id,
        client,
    )
    await fetch(dsn, "INSERT INTO import_lane (job_id, partition) VALUES ($1, 0)", job_id)
    return job_id


async def dead_letter(topology: broker.Topology, job_id: uuid.UUID, key: str) -> str:
    """A chunk message of ``job_id`` that failed 3 times, dead-lettered as a consumer does."""
    batch = Batch(0, 0, 2, 40, (ContactRow(2, key, "Dead Letter", None),), end_line=3)
    body = codec.encode(job_id, "gone", batch)
    message_id = codec.message_id(job_id, batch)
    message = aio_pika.Message(body, message_id=message_id, headers={broker.ATTEMPTS_HEADER: 3})
    connection = await broker.connect(RABBITMQ_URL, name="test-dead-letter")
    try:
        publisher = await broker.Publisher.open(connection)
        await broker.dead_letter(publisher, topology, message, "boom: the database refused it")
    finally:
        await connection.close()
    return message_id


async def listed(http: httpx.AsyncClient, bearer: str) -> dict[str, object]:
    response = await http.get("/v1/admin/dead-letters", headers=auth(bearer))
    assert response.status_code == 200, response.text
    document: dict[str, object] = response.json()
    return document


async def test_dead_letters_are_listed_per_client_and_replayed_while_the_import_runs(
    broker_server: Server, client_ids: itertools.count[int]
) -> None:
    client, other = next(client_ids), next(client_ids)
    owner = token(client, permissions=[CREATE, ADMIN])
    topology = topology_of(broker_server)
    async with httpx.AsyncClient(base_url=broker_server.url, timeout=20) as http:
        content = csv_bytes(HEADER, [("E", cpf(2800), "")])
        ended = (await upload(http, owner, content)).json()["id"]
        assert (await wait_terminal(http, owner, ended))["status"] == "completed"
        running = await running_job(broker_server.dsn, client)
        theirs = await running_job(broker_server.dsn, other)
        live_id = await dead_letter(topology, running, cpf(2801))
        ended_id = await dead_letter(topology, uuid.UUID(ended), cpf(2802))
        await dead_letter(topology, theirs, cpf(2803))

        page = await listed(http, owner)
        items = page["items"]
        assert isinstance(items, list)
        assert [item["message_id"] for item in items] == [live_id, ended_id]
        first = items[0]
        assert first["job_id"] == str(running)
        assert (first["chunk"], first["partition"], first["attempts"]) == (0, 0, 3)
        assert first["error"] == "boom: the database refused it"
        assert first["dead_lettered_at"]
        assert first["job_status"] == "importing"
        assert page["scanned"] == 3
        again = await listed(http, owner)  # a peek consumes nothing
        assert again["items"] == items

        replay = await http.post("/v1/admin/dead-letters/replay", headers=auth(owner))
        assert replay.status_code == 200, replay.text
        outcome = replay.json()
        assert (outcome["replayed"], outcome["replayed_ids"]) == (1, [live_id])
        assert [(s["message_id"], s["reason"]) for s in outcome["skipped"]] == [
            (ended_id, "job_ended")
        ]

        deadline = time.monotonic() + WAIT_S  # the main queue's consumer applies the chunk
        while cpf(2801) not in await db_state(broker_server.dsn, client):
            assert time.monotonic() < deadline, broker_server.output()
            await asyncio.sleep(0.05)
        chunk = await fetch(
            broker_server.dsn, "SELECT status FROM import_chunk WHERE job_id = $1", running
        )
        assert [r["status"] for r in chunk] == ["done"]
        left = await listed(http, owner)
        assert [item["message_id"] for item in left["items"]] == [ended_id]
        other_page = await listed(http, token(other, permissions=[ADMIN]))
        assert [item["job_id"] for item in other_page["items"]] == [str(theirs)]


async def test_undo_takes_an_import_back_refuses_a_conflict_and_lets_it_be_requeued(
    server: Server, http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    """Issue 15 point 1 over HTTP: POST /undo (IMPORT.ADMIN) ends the import ``undone`` with
    the client's contacts as before it; a later import that changed them makes the earlier's
    undo a 409 undo_conflict naming it; a plain user gets 403, another tenant 404; an undone
    import may be requeued, and imports again."""
    client = next(client_ids)
    owner = token(client, permissions=[CREATE, ADMIN])
    first = csv_bytes(HEADER, [("Ana", cpf(1201), "a@x.com"), ("Bia", cpf(1202), "")])
    a = await wait_terminal(http, owner, (await upload(http, owner, first)).json()["id"])
    second = csv_bytes(HEADER, [("Ana Nova", cpf(1201), "a2@x.com")])
    b = await wait_terminal(http, owner, (await upload(http, owner, second)).json()["id"])
    state_after_a_b = await db_state(server.dsn, client)

    refused = await http.post(f"/v1/imports/{a['id']}/undo", headers=auth(owner))
    assert_error(refused, 409, "undo_conflict")
    assert refused.json()["conflicts"][0]["imports"] == [b["id"]]
    assert await db_state(server.dsn, client) == state_after_a_b  # nothing undone
    plain = await http.post(f"/v1/imports/{b['id']}/undo", headers=auth(token(client)))
    assert plain.status_code == 403
    foreign = auth(token(next(client_ids), permissions=[ADMIN]))
    assert (await http.post(f"/v1/imports/{b['id']}/undo", headers=foreign)).status_code == 404

    undone_b = await http.post(f"/v1/imports/{b['id']}/undo", headers=auth(owner))
    assert undone_b.status_code == 200, undone_b.text
    assert undone_b.json()["job"]["status"] == "undone"
    undone_a = await http.post(f"/v1/imports/{a['id']}/undo", headers=auth(owner))
    assert undone_a.json()["job"]["status"] == "undone"
    assert await db_state(server.dsn, client) == {}
    assert (await notifications(server.dsn, a["id"]))[-1][1] == "import_undone"
    again = await http.post(f"/v1/imports/{a['id']}/undo", headers=auth(owner))
    assert again.json()["slices"] == 0  # a repeat changes nothing

    requeued = await http.post(f"/v1/imports/{a['id']}/requeue", headers=auth(owner))
    assert requeued.status_code == 202, requeued.text
    redone = await wait_terminal(http, owner, a["id"])
    assert counters(redone)["inserted"] == 2
    assert {s.name for s in (await db_state(server.dsn, client)).values()} == {"Ana", "Bia"}
