"""Requests first: the import waits for the requests in flight, boundedly."""

from __future__ import annotations

import asyncio
import time

import pytest

from importer.http.priority import PriorityMiddleware, RequestPriority, holds_turn


async def test_the_turn_is_free_when_no_request_is_in_flight() -> None:
    priority = RequestPriority(max_wait_s=10)
    started = time.monotonic()
    await priority.wait_turn()
    assert time.monotonic() - started < 1


async def test_the_import_waits_for_the_request_to_end() -> None:
    priority = RequestPriority(max_wait_s=10)
    with priority.request():
        waiting = asyncio.create_task(priority.wait_turn(), name="import-step")
        await asyncio.sleep(0)
        assert not waiting.done()
    await asyncio.wait_for(waiting, 1)  # released as soon as the request ended
    assert priority.in_flight == 0


async def test_the_wait_is_bounded_under_a_steady_stream_of_requests() -> None:
    priority = RequestPriority(max_wait_s=0.05)
    with priority.request():
        started = time.monotonic()
        await priority.wait_turn()
        assert 0.04 <= time.monotonic() - started < 1


async def test_nested_requests_release_the_turn_when_the_last_ends() -> None:
    priority = RequestPriority(max_wait_s=10)
    with priority.request():
        with priority.request():
            assert priority.in_flight == 2
        waiting = asyncio.create_task(priority.wait_turn(), name="import-step")
        await asyncio.sleep(0)
        assert not waiting.done()
    await asyncio.wait_for(waiting, 1)


@pytest.mark.parametrize(
    ("path", "holds"),
    [
        ("/v1/imports", True),
        ("/v1/imports/abc/start", True),
        ("/v1/layouts", True),
        ("/v1/imports/abc/events", False),
        ("/v1/imports/abc/errors", False),
        ("/healthz", False),
        ("/readyz", False),
        ("/metrics", False),
    ],
)
def test_long_lived_and_trivial_routes_do_not_hold_imports_back(path: str, holds: bool) -> None:
    assert holds_turn(path) is holds


async def test_the_middleware_holds_the_turn_during_the_request_only() -> None:
    priority = RequestPriority(max_wait_s=10)
    seen: list[int] = []

    async def app(scope: object, receive: object, send: object) -> None:
        seen.append(priority.in_flight)

    middleware = PriorityMiddleware(app, priority)  # type: ignore[arg-type]

    async def receive() -> dict[str, object]:
        return {}

    async def send(message: object) -> None:
        return

    await middleware({"type": "http", "path": "/v1/imports"}, receive, send)
    await middleware({"type": "http", "path": "/v1/imports/x/events"}, receive, send)
    await middleware({"type": "lifespan", "path": ""}, receive, send)
    assert seen == [1, 0, 0]
    assert priority.in_flight == 0
