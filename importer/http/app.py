"""The HTTP edge: FastAPI on uvicorn, built by :func:`create_app` from injected settings.

The lifespan owns every resource — the database pool, the object store, the token verifier and
the job workers — creating them at start-up and closing them at shutdown; nothing here is global
and nothing reads ``os.environ``. Routes (:mod:`importer.http.routes`, one module per OpenAPI
tag) are thin: parse HTTP, call :class:`ImportService`, shape the answer. Errors have one JSON
shape (:mod:`importer.http.errors`) and never carry a stack trace. The background tasks (job
workers, outbox relay) run under the one :class:`~importer.services.supervisor.Supervisor`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
from collections.abc import AsyncIterator, Callable

import structlog
from fastapi import FastAPI

from importer import wiring
from importer.adapters.postgres.admin import PostgresAdmin
from importer.adapters.postgres.catalog import CatalogStore
from importer.adapters.postgres.columns import PostgresColumns
from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.postgres.store import PostgresStore
from importer.adapters.postgres.undo import PostgresUndo
from importer.adapters.postgres.views import PostgresJobViews
from importer.adapters.postgres.webhooks import PostgresClientWebhooks
from importer.adapters.storage.local import LocalObjectStore
from importer.adapters.webhooks import SystemResolver
from importer.http import console
from importer.http.auth import TokenVerifier
from importer.http.deps import Resources
from importer.http.errors import install_error_handlers
from importer.http.priority import PriorityMiddleware, RequestPriority
from importer.http.routes import ROUTERS
from importer.metrics import ApiMetrics, MetricsMiddleware
from importer.services.admin import AdminService
from importer.services.columns import ColumnService
from importer.services.imports import ImportService
from importer.services.supervisor import Supervisor
from importer.services.worker import Worker
from importer.settings import Settings

log = structlog.get_logger(__name__)

# Connections the API's own requests may hold beside the workers' (one per import partition).
API_CONNECTIONS = 8


def begin_drain(app: FastAPI) -> None:
    """SIGTERM: stop workers taking jobs and end event streams, before connections close."""
    resources: Resources | None = getattr(app.state, "resources", None)
    if resources is not None:
        resources.drain()


def pool_size(settings: Settings) -> int:
    """The workers' connections (:func:`importer.wiring.pool_size`) and the API's own."""
    return wiring.pool_size(settings, settings.workers_per_process, others=API_CONNECTIONS)


@contextlib.asynccontextmanager
async def open_resources(
    app: FastAPI, settings: Settings, metrics: ApiMetrics, on_fatal: Callable[[], None]
) -> AsyncIterator[None]:
    """Create everything at start-up; at shutdown drain the workers, then close the pool."""
    verifier = TokenVerifier.from_settings(settings)  # a bad key fails the start, not requests
    objects = wiring.object_store(settings)
    await objects.ensure_bucket()
    pool = await connect_pool(
        settings.database_url, pool_size(settings), lock_timeout_ms=settings.lock_timeout_ms
    )
    # The workers share one store: one LISTEN connection wakes them when a job is queued.
    queue = PostgresJobQueue(
        pool,
        dsn=settings.database_url,
        compiled=settings.compiled,
        max_row_errors=settings.max_row_errors,
    )
    try:
        store = PostgresStore(
            pool, compiled=settings.compiled, max_row_errors=settings.max_row_errors
        )
        async with (
            wiring.accelerator_running(settings) as accelerator,
            wiring.fanout_running(
                settings,
                store,
                observer := wiring.hinting(metrics.pipeline, accelerator),
                on_fatal,
            ) as fanout,
        ):
            catalog = CatalogStore(pool)

            supervisor = Supervisor(asyncio.Event(), on_fatal, metrics.workers.set)
            workers = [
                Worker(
                    queue,
                    objects,
                    settings,
                    owner=wiring.worker_owner(index),
                    stop=supervisor.stop_event,
                    throttle=app.state.priority,
                    observer=observer,
                    publisher=fanout,
                    local_files=LocalObjectStore,
                )
                for index in range(settings.workers_per_process)
            ]
            service = ImportService(
                PostgresJobViews(pool, retention_days=settings.retention_days),
                catalog,
                objects,
                settings,
                resolver=SystemResolver(),
            )
            relay = wiring.outbox_relay(settings, pool)
            app.state.resources = Resources(
                settings,
                service,
                verifier,
                catalog,
                objects,
                supervisor,
                metrics,
                relay,
                accelerator,
            )
            app.state.resources.admin = AdminService(
                PostgresAdmin(pool),
                wiring.dead_letter_queue(settings),
                (
                    PostgresUndo(pool, retention_days=settings.retention_days),
                    PostgresJobQueue(
                        pool, compiled=settings.compiled, max_row_errors=settings.max_row_errors
                    ),
                ),
            )
            app.state.resources.columns = ColumnService(
                PostgresJobViews(pool, retention_days=settings.retention_days),
                PostgresColumns(pool),
                objects,
                settings,
            )
            app.state.resources.client_webhooks = PostgresClientWebhooks(pool)
            app.state.resources.resolver = SystemResolver()
            if accelerator is not None:
                accelerator.hub.start()
            webhooks = wiring.webhook_delivery(settings, pool, metrics.pipeline.webhook_attempt)
            supervisor.start(workers, relay, webhooks)
            try:
                yield
            finally:
                # The workers drain first (the chunk consumer, at the block's end, then finishes
                # its deliveries); the relay and the webhook delivery stop last: they send what
                # the workers wrote.
                await supervisor.stop()
                log.info("workers_drained")
    finally:
        await queue.close()
        await pool.close()


def create_app(settings: Settings, *, on_fatal: Callable[[], None] | None = None) -> FastAPI:
    """The API and its workers, configured by ``settings`` alone.

    ``on_fatal`` is called when a worker dies unasked (the server uses it to shut down).
    """
    metrics = ApiMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_resources(app, settings, metrics, on_fatal or (lambda: None)):
            yield

    app = FastAPI(
        title="importer",
        version=importlib.metadata.version("importer"),
        summary="Imports huge contact lists (CSV/JSONL) into PostgreSQL, exactly.",
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.priority = RequestPriority()  # the workers' imports give way to requests
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(PriorityMiddleware, priority=app.state.priority)
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(console.router)
    return app
