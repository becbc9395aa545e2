"""The API process's background tasks: the job workers and the outbox relay.

Both run as named tasks beside the requests; either ending unasked is fatal (``on_fatal``): the
process stops and says why, rather than serving an API whose jobs no longer run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from importer import wiring
from importer.metrics import ApiMetrics
from importer.services.relay import OutboxRelay
from importer.services.worker import Worker

log = structlog.get_logger(__name__)


class WorkerGroup:
    """N job workers as named, supervised tasks; stopping is an event, then a drain.

    A worker that ends on its own (it crashed, or returned without being asked to) is logged
    with its error and reported through ``on_fatal``: the process stops and says why, rather than
    serving an API whose jobs no longer run.
    """

    def __init__(
        self,
        make_worker: Callable[[str, asyncio.Event], Worker],
        count: int,
        on_fatal: Callable[[], None],
        metrics: ApiMetrics,
    ) -> None:
        self._make_worker = make_worker
        self._count = count
        self._on_fatal = on_fatal
        self._metrics = metrics
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.failure: BaseException | str | None = None

    def start(self) -> None:
        for index in range(self._count):
            worker = self._make_worker(wiring.worker_owner(index), self._stop)
            task = asyncio.create_task(worker.run(), name=f"importer-worker-{index}")
            task.add_done_callback(self._ended)
            self._tasks.append(task)
        self._metrics.workers.set(len(self._tasks))

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._metrics.workers.dec()
        if self._stop.is_set():
            return
        error = None if task.cancelled() else task.exception()
        self.failure = error or f"{task.get_name()} returned without being stopped"
        log.error("worker_died", task=task.get_name(), error=repr(self.failure))
        self._on_fatal()

    @property
    def healthy(self) -> bool:
        return self.failure is None and not self._stop.is_set()

    def drain(self) -> None:
        """Stop taking work; running imports finish their in-flight batches and release leases."""
        self._stop.set()

    async def stop(self) -> None:
        self.drain()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def start_relay(relay: OutboxRelay, on_fatal: Callable[[], None]) -> asyncio.Task[None]:
    """The outbox relay as a named task; ending unasked is fatal, like a worker's death."""

    def ended(task: asyncio.Task[None]) -> None:
        if relay.stopping:
            return
        error = None if task.cancelled() else task.exception()
        log.error("outbox_relay_died", error=repr(error or "returned without being stopped"))
        on_fatal()

    task = asyncio.create_task(relay.run(), name="importer-outbox-relay")
    task.add_done_callback(ended)
    return task
