"""The one supervisor of a process's background tasks: the job workers, the outbox relay and the
webhook delivery.

``importer serve`` and ``importer worker`` both run their workers (with a broker, the relay; the
webhook delivery always) through it. Every task is named and owned here; stopping is an event
(the workers drain: their running imports commit the batches in flight and release their
leases), the relay and the webhook delivery stop last so that they send what the drained jobs
wrote. A task that ends while nobody asked it to (it crashed, or returned) is fatal: it is
logged with its error (``worker_died``, ``outbox_relay_died``, ``webhook_delivery_died``),
kept in :attr:`Supervisor.failure` and reported through ``on_fatal``; the process stops and
says why rather than go on with jobs that no longer run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import structlog

from importer.services.relay import OutboxRelay
from importer.services.webhooks import WebhookDelivery
from importer.services.worker import Worker

log = structlog.get_logger(__name__)


class Supervisor:
    """Starts, watches and stops the background tasks of one process."""

    def __init__(
        self,
        stop: asyncio.Event,
        on_fatal: Callable[[], None] | None = None,
        on_worker_count: Callable[[int], None] | None = None,
    ) -> None:
        self.stop_event = stop  # the workers' stop: set by a drain, a signal or a failure
        self._on_fatal = on_fatal
        self._on_worker_count = on_worker_count
        self._workers: list[asyncio.Task[None]] = []
        self._relay: OutboxRelay | None = None
        self._relay_task: asyncio.Task[None] | None = None
        self._webhooks: WebhookDelivery | None = None
        self._webhooks_task: asyncio.Task[None] | None = None
        self._failed = asyncio.Event()
        self.failure: BaseException | str | None = None

    def start(
        self,
        workers: Sequence[Worker],
        relay: OutboxRelay | None = None,
        webhooks: WebhookDelivery | None = None,
    ) -> None:
        for worker in workers:
            task = asyncio.create_task(worker.run(), name=f"importer-worker:{worker.owner}")
            task.add_done_callback(self._worker_ended)
            self._workers.append(task)
        self._count_workers()
        if relay is not None:
            self._relay = relay
            self._relay_task = asyncio.create_task(relay.run(), name="importer-outbox-relay")
            self._relay_task.add_done_callback(self._relay_ended)
        if webhooks is not None:
            self._webhooks = webhooks
            self._webhooks_task = asyncio.create_task(
                webhooks.run(), name="importer-webhook-delivery"
            )
            self._webhooks_task.add_done_callback(self._webhooks_ended)

    @property
    def healthy(self) -> bool:
        return self.failure is None and not self.stop_event.is_set()

    def drain(self) -> None:
        """Stop taking work; running imports finish their in-flight batches and release leases."""
        self.stop_event.set()

    async def stop(self) -> None:
        """Drain and wait for the workers, then stop the relay and the webhook delivery and
        wait for them."""
        self.drain()
        await asyncio.gather(*self._workers, return_exceptions=True)
        if self._relay is not None:
            self._relay.stop()
        if self._webhooks is not None:
            self._webhooks.stop()
        last = [task for task in (self._relay_task, self._webhooks_task) if task is not None]
        await asyncio.gather(*last, return_exceptions=True)

    async def run(self) -> None:
        """Until the workers are stopped (and drained) or one task fails; then stop everything.

        Raises the failure: a task's own error, or RuntimeError when it ended without one.
        """
        try:
            failed = asyncio.create_task(self._failed.wait(), name="importer-supervisor:failed")
            drained = asyncio.create_task(self._drained(), name="importer-supervisor:drained")
            await asyncio.wait([failed, drained], return_when=asyncio.FIRST_COMPLETED)
            failed.cancel()
            drained.cancel()
        finally:
            await self.stop()
        if isinstance(self.failure, BaseException):
            raise self.failure
        if self.failure is not None:
            raise RuntimeError(self.failure)

    async def _drained(self) -> bool:
        await asyncio.gather(*self._workers, return_exceptions=True)
        return True

    def _count_workers(self) -> None:
        if self._on_worker_count is not None:
            self._on_worker_count(sum(not task.done() for task in self._workers))

    def _worker_ended(self, task: asyncio.Task[None]) -> None:
        self._count_workers()
        if not self.stop_event.is_set():
            self._fail(task, "worker_died")

    def _relay_ended(self, task: asyncio.Task[None]) -> None:
        if self._relay is not None and not self._relay.stopping:
            self._fail(task, "outbox_relay_died")

    def _webhooks_ended(self, task: asyncio.Task[None]) -> None:
        if self._webhooks is not None and not self._webhooks.stopping:
            self._fail(task, "webhook_delivery_died")

    def _fail(self, task: asyncio.Task[None], event: str) -> None:
        error = None if task.cancelled() else task.exception()
        self.failure = error or f"{task.get_name()} returned without being stopped"
        log.error(event, task=task.get_name(), error=repr(self.failure))
        self._failed.set()
        self.stop_event.set()
        if self._on_fatal is not None:
            self._on_fatal()
