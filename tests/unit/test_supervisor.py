"""The one supervisor of background tasks: stop by event, drain, the relay last, failures fatal."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from importer.services.supervisor import Supervisor


class FakeWorker:
    """Runs until the shared stop is set (or fails / returns when told to)."""

    def __init__(self, owner: str, stop: asyncio.Event, *, fail: Exception | None = None) -> None:
        self.owner = owner
        self._stop = stop
        self._fail = fail
        self.started = asyncio.Event()
        self.drained = False

    async def run(self) -> None:
        self.started.set()
        if self._fail is not None:
            raise self._fail
        await self._stop.wait()
        await asyncio.sleep(0)  # the drain: in-flight batches commit
        self.drained = True


class FakeRelay:
    def __init__(self, order: list[str], *, die: bool = False) -> None:
        self.stopping = False
        self._order = order
        self._die = die
        self._stopped = asyncio.Event()

    async def run(self) -> None:
        if self._die:
            return
        await self._stopped.wait()
        self._order.append("relay stopped")

    def stop(self) -> None:
        self.stopping = True
        self._stopped.set()


def supervisor(stop: asyncio.Event, **kwargs: Any) -> Supervisor:
    return Supervisor(stop, **kwargs)


async def test_workers_drain_then_the_relay_stops_last() -> None:
    stop = asyncio.Event()
    order: list[str] = []
    counts: list[int] = []
    workers = [FakeWorker(f"w{i}", stop) for i in range(3)]
    sup = supervisor(stop, on_worker_count=counts.append)
    sup.start(cast(Any, workers), cast(Any, FakeRelay(order)))
    assert sup.healthy
    await asyncio.gather(*(w.started.wait() for w in workers))
    stop.set()  # a signal
    await sup.run()
    order.append("after run")
    assert all(w.drained for w in workers)
    assert order == ["relay stopped", "after run"]
    assert counts[0] == 3
    assert counts[-1] == 0
    assert sup.failure is None
    assert not sup.healthy


async def test_a_worker_that_dies_is_fatal_and_its_error_raised() -> None:
    stop = asyncio.Event()
    fatal: list[bool] = []
    healthy = FakeWorker("ok", stop)
    broken = FakeWorker("bad", stop, fail=ValueError("boom"))
    sup = supervisor(stop, on_fatal=lambda: fatal.append(True))
    with capture_logs() as logs:
        sup.start(cast(Any, [healthy, broken]), cast(Any, FakeRelay([])))
        with pytest.raises(ValueError, match="boom"):
            await sup.run()
    assert fatal == [True]
    assert healthy.drained  # the others were stopped and drained
    died = [e for e in logs if e["event"] == "worker_died"]
    assert len(died) == 1
    assert died[0]["task"] == "importer-worker:bad"


async def test_a_relay_that_ends_unasked_is_fatal() -> None:
    stop = asyncio.Event()
    worker = FakeWorker("w", stop)
    sup = supervisor(stop)
    with capture_logs() as logs:
        sup.start(cast(Any, [worker]), cast(Any, FakeRelay([], die=True)))
        with pytest.raises(RuntimeError, match="returned without being stopped"):
            await sup.run()
    assert worker.drained
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["outbox_relay_died"]


async def test_stop_without_run_drains_everything() -> None:
    stop = asyncio.Event()
    order: list[str] = []
    worker = FakeWorker("w", stop)
    sup = supervisor(stop)
    sup.start(cast(Any, [worker]), cast(Any, FakeRelay(order)))
    await worker.started.wait()
    await sup.stop()
    assert worker.drained
    assert order == ["relay stopped"]
    assert sup.failure is None  # asked to stop: nothing is a failure


class FakeWebhooks(FakeRelay):
    async def run(self) -> None:
        if self._die:
            return
        await self._stopped.wait()
        self._order.append("webhooks stopped")


async def test_the_webhook_delivery_stops_after_the_workers_drain() -> None:
    stop = asyncio.Event()
    order: list[str] = []
    worker = FakeWorker("w", stop)
    sup = supervisor(stop)
    sup.start(cast(Any, [worker]), None, cast(Any, FakeWebhooks(order)))
    await worker.started.wait()
    stop.set()
    await sup.run()
    assert worker.drained
    assert order == ["webhooks stopped"]


async def test_a_webhook_delivery_that_ends_unasked_is_fatal() -> None:
    stop = asyncio.Event()
    worker = FakeWorker("w", stop)
    sup = supervisor(stop)
    with capture_logs() as logs:
        sup.start(cast(Any, [worker]), None, cast(Any, FakeWebhooks([], die=True)))
        with pytest.raises(RuntimeError, match="returned without being stopped"):
            await sup.run()
    assert worker.drained
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["webhook_delivery_died"]
