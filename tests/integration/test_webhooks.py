"""Completion webhooks on the real PostgreSQL, delivered to a real HTTP receiver on 127.0.0.1:
the signature verifies, retries after 500s and timeouts carry the same delivery id and body,
the bound gives up, one delivery per finalization, several instances share the work, and a
target refused at delivery time is never contacted."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ssl
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import orjson
import pytest
from structlog.testing import capture_logs

from importer.adapters.postgres.webhooks import (
    PostgresClientWebhooks,
    PostgresWebhooks,
    enqueue_webhook,
)
from importer.adapters.webhooks import HttpxWebhookSender, SystemResolver
from importer.core.models import JobStatus
from importer.core.webhooks import RetryPolicy, signature_matches
from importer.ports import Resolver
from importer.services.documents import job_document
from importer.services.webhooks import WebhookDelivery
from tests.jobs_support import Env, bare_job, eventually, job_env
from tests.support import fetch
from tests.tls_support import tls_for
from tests.webhook_receiver import HANG, receiving

pytestmark = pytest.mark.integration


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


SECRET = "integration-secret-0123456789"
FAST = RetryPolicy(max_attempts=4, max_age_s=60.0, first_delay_s=0.05)


@pytest.fixture
async def env(db_dsn: str, tmp_path: Path) -> AsyncIterator[Env]:
    async with job_env(db_dsn, tmp_path) as opened:
        yield opened


async def finalized_job(env: Env, client_id: int, notify_url: str | None) -> uuid.UUID:
    """A job with ``notify_url`` (None: the client's default) run to its finalization."""
    job_id = await bare_job(env, client_id, JobStatus.UPLOADED)
    if notify_url is not None:
        await env.pool.execute(
            "UPDATE import_job SET notify_url = $2 WHERE id = $1", job_id, notify_url
        )
    for status in (JobStatus.QUEUED, JobStatus.NORMALIZING, JobStatus.IMPORTING):
        await env.store.transition(job_id, status)
    assert await env.store.finalize(job_id, None) is not None
    return job_id


@contextlib.asynccontextmanager
async def delivering(
    env: Env,
    policy: RetryPolicy = FAST,
    *,
    timeout_s: float = 2.0,
    allow_private: bool = True,
    instances: int = 1,
    resolver: Resolver | None = None,
    verify: ssl.SSLContext | bool = True,
) -> AsyncIterator[Sequence[WebhookDelivery]]:
    loops = [
        WebhookDelivery(
            PostgresWebhooks(env.pool, dsn=env.dsn),
            HttpxWebhookSender(verify=verify),
            resolver or SystemResolver(),
            policy,
            timeout_s=timeout_s,
            allow_private=allow_private,
            poll_s=0.05,
        )
        for _ in range(instances)
    ]
    tasks = [asyncio.create_task(loop.run(), name=f"webhooks-{i}") for i, loop in enumerate(loops)]
    try:
        yield loops
    finally:
        for loop in loops:
            loop.stop()
        await asyncio.gather(*tasks)


async def delivery(env: Env, job_id: uuid.UUID) -> dict[str, object] | None:
    rows = await fetch(
        env.dsn,
        "SELECT delivery_id, attempts, delivered_at, gave_up_at, last_error, url, body"
        " FROM webhook_delivery WHERE job_id = $1",
        job_id,
    )
    return dict(rows[0]) if rows else None


async def ended(env: Env, job_id: uuid.UUID) -> dict[str, object] | None:
    row = await delivery(env, job_id)
    if row is None or (row["delivered_at"] is None and row["gave_up_at"] is None):
        return None
    return row


async def attempts(env: Env, delivery_id: str) -> list[tuple[int, int | None, str | None]]:
    rows = await fetch(
        env.dsn,
        "SELECT attempt, status_code, error, duration_ms FROM webhook_attempt"
        " WHERE delivery_id = $1 ORDER BY attempt",
        delivery_id,
    )
    assert all(r["duration_ms"] is not None for r in rows)
    return [(r["attempt"], r["status_code"], r["error"]) for r in rows]


async def set_secret(env: Env, client_id: int, notify_url: str | None = None) -> None:
    await PostgresClientWebhooks(env.pool).set(client_id, SECRET, notify_url, "unused")


async def test_a_finalization_posts_the_signed_job_document(
    env: Env, client_ids: Iterator[int]
) -> None:
    client = next(client_ids)
    await set_secret(env, client)
    async with receiving([200]) as receiver:
        job_id = await finalized_job(env, client, receiver.url())
        async with delivering(env):
            [request] = await receiver.requests_at_least(1)
            row = await eventually(lambda: ended(env, job_id))
    assert request.method == "POST"
    assert request.target == "/hooks/import"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-importer-delivery"] == f"notification:{job_id}"
    assert request.headers["x-importer-event"] == "import_done"
    assert signature_matches(request.body, SECRET, request.headers["x-importer-signature"])
    document = orjson.loads(request.body)
    view = await env.views.view_job(client, job_id)
    assert document == orjson.loads(orjson.dumps(job_document(view, now())))  # GET's document
    assert (document["id"], document["status"]) == (str(job_id), "completed")
    assert row["delivered_at"] is not None
    assert row["attempts"] == 1
    assert await attempts(env, f"notification:{job_id}") == [(1, 200, None)]


async def test_retries_after_a_500_and_a_timeout_with_the_same_id_and_body(
    env: Env, client_ids: Iterator[int]
) -> None:
    client = next(client_ids)
    await set_secret(env, client)
    async with receiving([500, HANG, 200]) as receiver:
        job_id = await finalized_job(env, client, receiver.url())
        with capture_logs() as logs:
            async with delivering(env, timeout_s=0.5):
                requests = await receiver.requests_at_least(3)
                await eventually(lambda: ended(env, job_id))
    lines = [e for e in logs if e["event"] == "webhook_attempt"]  # one line per attempt
    assert [(e["attempt"], e["outcome"]) for e in lines] == [
        (1, "retry"),
        (2, "retry"),
        (3, "delivered"),
    ]
    assert lines[0]["status_code"] == 500
    assert lines[0]["retry_in_s"] == FAST.first_delay_s
    assert len(requests) == 3
    assert {r.headers["x-importer-delivery"] for r in requests} == {f"notification:{job_id}"}
    assert len({r.body for r in requests}) == 1  # the body frozen at the first attempt
    for request in requests:
        assert signature_matches(request.body, SECRET, request.headers["x-importer-signature"])
    recorded = await attempts(env, f"notification:{job_id}")
    assert [(a, code) for a, code, _ in recorded] == [(1, 500), (2, None), (3, 200)]
    assert recorded[1][2] is not None
    assert "timed out" in recorded[1][2]


async def test_gives_up_after_the_attempts_bound(env: Env, client_ids: Iterator[int]) -> None:
    client = next(client_ids)
    await set_secret(env, client)
    async with receiving([500]) as receiver:
        job_id = await finalized_job(env, client, receiver.url())
        async with delivering(env, RetryPolicy(max_attempts=3, first_delay_s=0.05)):
            row = await eventually(lambda: ended(env, job_id))
        assert len(receiver.received) == 3
    assert row["gave_up_at"] is not None
    assert row["delivered_at"] is None
    assert row["last_error"] == "status 500"
    assert [code for _, code, _ in await attempts(env, f"notification:{job_id}")] == [500] * 3


async def test_gives_up_after_the_age_bound(env: Env, client_ids: Iterator[int]) -> None:
    client = next(client_ids)
    await set_secret(env, client)
    async with receiving([503]) as receiver:
        job_id = await finalized_job(env, client, receiver.url())
        # The first retry would come 5 s later, past the 1 s bound: one attempt only.
        async with delivering(env, RetryPolicy(max_attempts=8, max_age_s=1.0, first_delay_s=5)):
            row = await eventually(lambda: ended(env, job_id))
        assert len(receiver.received) == 1
    assert row["gave_up_at"] is not None


async def test_one_delivery_per_finalization_and_the_client_default(
    env: Env, client_ids: Iterator[int]
) -> None:
    client, silent = next(client_ids), next(client_ids)
    async with receiving([200]) as receiver:
        await set_secret(env, client, receiver.url("/default"))
        job_id = await bare_job(env, client, JobStatus.UPLOADED)
        for status in (JobStatus.QUEUED, JobStatus.NORMALIZING, JobStatus.IMPORTING):
            await env.store.transition(job_id, status)
        results = await asyncio.gather(*(env.store.finalize(job_id, None) for _ in range(10)))
        assert sum(r is not None for r in results) == 1
        quiet_job = await finalized_job(env, silent, None)  # no target: no delivery
        async with delivering(env):
            [request] = await receiver.requests_at_least(1)
            await eventually(lambda: ended(env, job_id))
    assert request.target == "/default"
    count = await fetch(env.dsn, "SELECT count(*) AS n FROM webhook_delivery")
    assert count[0]["n"] == 1
    assert await delivery(env, quiet_job) is None


async def test_each_run_of_a_requeued_job_has_its_own_delivery(
    env: Env, client_ids: Iterator[int]
) -> None:
    client = next(client_ids)
    await set_secret(env, client)
    async with receiving([200]) as receiver:
        job_id = await bare_job(env, client, JobStatus.UPLOADED)
        await env.pool.execute(
            "UPDATE import_job SET notify_url = $2 WHERE id = $1", job_id, receiver.url()
        )
        for status in (JobStatus.QUEUED, JobStatus.NORMALIZING, JobStatus.IMPORTING):
            await env.store.transition(job_id, status)
        assert await env.store.finalize(job_id, None, cancelled=True) is not None
        await env.admin.requeue_job(client, job_id, "requeue:1")  # back to queued: run 2
        for status in (JobStatus.NORMALIZING, JobStatus.IMPORTING):
            await env.store.transition(job_id, status)
        assert await env.store.finalize(job_id, None, cancelled=True) is not None
        async with delivering(env):
            requests = await receiver.requests_at_least(2)
    ids = sorted(r.headers["x-importer-delivery"] for r in requests)
    assert ids == [f"notification:{job_id}", f"notification:{job_id}:2"]
    assert {r.headers["x-importer-event"] for r in requests} == {"import_cancelled"}


async def test_the_undo_s_hook_enqueues_an_event_in_the_caller_s_transaction(
    env: Env, client_ids: Iterator[int]
) -> None:
    """What the undo (issue 15, point 1) will call in its transaction: one more event of the
    job, to the same target, under its own id; a job without a target gets none."""
    client, silent = next(client_ids), next(client_ids)
    await set_secret(env, client)
    async with receiving([200]) as receiver:
        job_id = await finalized_job(env, client, receiver.url())
        quiet = await finalized_job(env, silent, None)
        async with env.pool.acquire() as conn, conn.transaction():
            assert await enqueue_webhook(conn, job_id, f"undone:{job_id}", "import_undone")
            assert not await enqueue_webhook(conn, job_id, f"undone:{job_id}", "import_undone")
            assert not await enqueue_webhook(conn, quiet, f"undone:{quiet}", "import_undone")
        async with delivering(env):
            requests = await receiver.requests_at_least(2)
    events = sorted(
        (r.headers["x-importer-delivery"], r.headers["x-importer-event"]) for r in requests
    )
    assert events == [
        (f"notification:{job_id}", "import_done"),
        (f"undone:{job_id}", "import_undone"),
    ]


async def test_several_instances_share_the_deliveries(env: Env, client_ids: Iterator[int]) -> None:
    client = next(client_ids)
    await set_secret(env, client)
    async with receiving([200]) as receiver:
        jobs = [await finalized_job(env, client, receiver.url()) for _ in range(12)]
        async with delivering(env, instances=3) as loops:
            for job_id in jobs:
                await eventually(lambda job_id=job_id: ended(env, job_id))
        ids = [r.headers["x-importer-delivery"] for r in receiver.received]
    assert sorted(ids) == sorted(f"notification:{j}" for j in jobs)  # each once, none lost
    assert sum(loop.attempts for loop in loops) == 12


async def test_a_private_target_is_refused_at_delivery_time(
    env: Env, client_ids: Iterator[int]
) -> None:
    client = next(client_ids)
    await set_secret(env, client)
    async with receiving([200]) as receiver:
        job_id = await finalized_job(env, client, receiver.url())
        policy = RetryPolicy(max_attempts=2, first_delay_s=0.05)
        async with delivering(env, policy, allow_private=False):
            row = await eventually(lambda: ended(env, job_id))
        assert receiver.received == []
    assert row["gave_up_at"] is not None
    recorded = await attempts(env, f"notification:{job_id}")
    assert len(recorded) == 2
    assert all(code is None and error and "target refused" in error for _, code, error in recorded)


async def test_a_redirect_is_not_followed(env: Env, client_ids: Iterator[int]) -> None:
    client = next(client_ids)
    await set_secret(env, client)
    async with receiving([302, 200]) as receiver:
        job_id = await finalized_job(env, client, receiver.url())
        async with delivering(env):
            await eventually(lambda: ended(env, job_id))
        assert [r.target for r in receiver.received] == ["/hooks/import"] * 2
    assert [code for _, code, _ in await attempts(env, f"notification:{job_id}")] == [302, 200]


class Pinned:
    """A resolver that answers one name with loopback (the https receiver's)."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def resolve(self, host: str, port: int) -> list[str]:
        return ["127.0.0.1"] if host == self.name else []


async def test_https_connects_to_the_checked_address_and_verifies_the_name(
    env: Env, client_ids: Iterator[int], tmp_path: Path
) -> None:
    """The attempt goes to the address the check resolved, presenting the URL's host in Host,
    SNI and the certificate check: a certificate for the name passes, one for another fails."""
    client = next(client_ids)
    await set_secret(env, client)
    tls = tls_for("hooks.test", tmp_path)
    async with receiving([200], tls.server) as receiver:
        job_id = await finalized_job(env, client, receiver.url(host="hooks.test"))
        async with delivering(env, resolver=Pinned("hooks.test"), verify=tls.client):
            [request] = await receiver.requests_at_least(1)
            await eventually(lambda: ended(env, job_id))
        assert request.headers["host"] == f"hooks.test:{receiver.port}"
    assert signature_matches(request.body, SECRET, request.headers["x-importer-signature"])
    assert await attempts(env, f"notification:{job_id}") == [(1, 200, None)]

    other = tls_for("other.test", tmp_path)
    async with receiving([200], other.server) as receiver:
        job_id = await finalized_job(env, client, receiver.url(host="hooks.test"))
        policy = RetryPolicy(max_attempts=1)
        async with delivering(env, policy, resolver=Pinned("hooks.test"), verify=other.client):
            row = await eventually(lambda: ended(env, job_id))
    assert row["gave_up_at"] is not None
    [(_, code, error)] = await attempts(env, f"notification:{job_id}")
    assert code is None
    assert error is not None
    assert "certificate" in error.lower(), error
