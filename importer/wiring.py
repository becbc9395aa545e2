"""The one place that wires adapters to ports for the command line.

Why this module is long: it is the one place choosing an adapter for every port (the pool, the
stores, the broker's, Redis's, the object store, the webhook delivery) for every command;
split, the choices would be made in as many places as there are commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import structlog

from importer.adapters.postgres.admin import PostgresAdmin
from importer.adapters.postgres.outbox import PostgresOutbox
from importer.adapters.postgres.pool import connect_pool, migrate
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.postgres.store import PostgresStore
from importer.adapters.postgres.undo import PostgresUndo
from importer.adapters.postgres.views import PostgresJobViews
from importer.adapters.storage.local import LocalObjectStore
from importer.core.columns import ClientColumns, memory_of
from importer.core.errors import AcceleratorError, ConfigurationError
from importer.core.models import InputFormat, Job
from importer.core.objects import StoredObject
from importer.core.report import write_csv_duplicates, write_csv_report
from importer.core.unreachable import HINTS, mask_url
from importer.pipeline.fanout import ChunkHandler, FanoutSettings
from importer.pipeline.observers import HintingObserver
from importer.ports import (
    BatchPublisher,
    ClientWebhooks,
    DeadLetterQueue,
    MessagePublisher,
    ObjectStore,
    PipelineObserver,
    Progress,
    Resolver,
    Source,
    Store,
)
from importer.services import maintenance
from importer.services.admin import AdminService
from importer.services.columns import (
    HEAD_ROWS,
    ColumnsStep,
    columns_step,
    read_head,
    transient_job,
)
from importer.services.leases import process_owner
from importer.services.local import (
    S3_SCHEME,
    ImportOutcome,
    ImportRequest,
    S3Location,
    apply_job,
    import_source,
    parse_s3_url,
    resume_job,
    seal_local_file,
)
from importer.services.relay import OutboxRelay
from importer.services.reports import available_source, source_report
from importer.services.runs import ObjectSource, job_config
from importer.services.supervisor import Supervisor
from importer.services.webhooks import AttemptObserver, WebhookDelivery, check_notify_url
from importer.services.worker import Worker
from importer.settings import Settings

if TYPE_CHECKING:
    from importer.adapters.postgres.pool import Pool
    from importer.adapters.rabbit.broker import Topology
    from importer.adapters.redis import RedisAccelerator

log = structlog.get_logger(__name__)

# How long the start-up look at Redis waits for its answer (it delays nothing meanwhile).
REDIS_FIRST_CONTACT_S = 5.0


@contextlib.asynccontextmanager
async def stop_on_signals() -> AsyncIterator[asyncio.Event]:
    """An event set by SIGINT or SIGTERM: the run finishes its in-flight batches and stops."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        yield stop
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def object_store(settings: Settings) -> ObjectStore:
    """S3 when an endpoint is configured, else the local directory; the one place choosing."""
    if settings.s3_endpoint_url is None:
        return LocalObjectStore(Path(settings.storage_dir))
    # Imported here: botocore adds ~0.15 s to every start of a CLI that may never touch S3.
    from importer.adapters.storage.s3 import S3ObjectStore

    return S3ObjectStore(
        bucket=settings.bucket,
        endpoint_url=settings.s3_endpoint_url,
        region=settings.aws_region,
        access_key_id=settings.aws_access_key_id,
        secret_access_key=settings.aws_secret_access_key,
    )


async def run_migrate(settings: Settings) -> None:
    await migrate(settings.database_url)


def s3_store(settings: Settings, location: S3Location) -> ObjectStore:
    """The object store of ``location``'s bucket with the service's S3 settings; refused when
    no S3 is configured (S3_ENDPOINT_URL)."""
    if settings.s3_endpoint_url is None:
        raise ConfigurationError(
            f"{location.url}: no S3 is configured; set S3_ENDPOINT_URL (with AWS_ACCESS_KEY_ID, "
            "AWS_SECRET_ACCESS_KEY and AWS_REGION), or import a local path"
        )
    return object_store(dataclasses.replace(settings, bucket=location.bucket))


Opened = tuple[Source, StoredObject, Path | None]


async def open_cli_source(settings: Settings, location: Path | S3Location) -> Opened:
    """The command line's source with what to seal on its job, before anything else connects.

    A local file (an absolute path) is hashed once: its path, size and sha256 are sealed on the
    job, so ``importer job resume`` can check it. An object is read once to seal its size and
    sha256, then streamed pinned to those bytes (a replaced object fails the job
    ``checksum_mismatch``), as the workers do. An s3:// URL without S3 is refused.
    """
    if not isinstance(location, S3Location):
        local = await seal_local_file(location, LocalObjectStore)
        return local.source, local.sealed, local.path
    objects = s3_store(settings, location)
    stored, pinned = await objects.seal(location.key)
    source = ObjectSource(
        objects, location.key, size=stored.size, pinned=pinned, name=location.name
    )
    return source, stored, None


async def check_cli_notify_url(settings: Settings, pool: Pool, request: ImportRequest) -> None:
    """A command line's ``--notify-url``: the SSRF checks and the client's secret, as the API's
    create (InvalidRequestError otherwise)."""
    from importer.adapters.postgres.catalog import CatalogStore
    from importer.adapters.webhooks import SystemResolver

    assert request.notify_url is not None
    catalog = CatalogStore(pool)
    await check_notify_url(
        request.notify_url, SystemResolver(), catalog, request.client_id, settings
    )


def resume_store(settings: Settings, job: Job) -> ObjectStore:
    """Where a resumed job's file is: the bucket of its s3:// URL (a command-line import of an
    object), else the service's own store (an upload)."""
    if job.source.startswith(S3_SCHEME):
        return s3_store(settings, parse_s3_url(job.source))
    return object_store(settings)


class Interrupt:
    """The command line's SIGINT or SIGTERM: the first sets ``event`` (the import stops between
    chunks and ends ``cancelled``); a second one exits at once, like ``kill -9`` (the job's
    lease then expires and the job is abandoned, resumable)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.signal: signal.Signals | None = None

    def receive(self, sig: signal.Signals) -> None:
        if self.signal is not None:
            os.write(
                2, b"importer: interrupted again: exiting now (resumable once its lease expires)\n"
            )
            os._exit(128 + sig)
        self.signal = sig
        self.event.set()

    @property
    def exit_code(self) -> int | None:
        """128 + the signal's number (130 for SIGINT, 143 for SIGTERM), or None."""
        return None if self.signal is None else 128 + self.signal


@contextlib.asynccontextmanager
async def interrupt_on_signals(interrupt: Interrupt) -> AsyncIterator[asyncio.Event]:
    """SIGINT and SIGTERM go to ``interrupt`` while the block runs; yields its event."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, interrupt.receive, sig)
    try:
        yield interrupt.event
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


@dataclasses.dataclass(frozen=True, slots=True)
class Reports:
    """Where a command-line run writes its reports once it ends (None: not written)."""

    errors_out: Path | None = None
    duplicates_out: Path | None = None
    errors_format: str = "csv"  # or "source": the rejected rows as sent


async def run_import(
    settings: Settings,
    path: Path | S3Location,
    request: ImportRequest,
    progress: Progress | None,
    reports: Reports,
    interrupt: Interrupt,
    announce: Callable[[uuid.UUID], None] | None = None,
) -> ImportOutcome:
    """Import one local file (an absolute path) or S3 object in this process, its size and sha256
    sealed on the job; write the error report when asked."""
    source, sealed, local_path = await open_cli_source(settings, path)
    pool = await connect_pool(
        settings.database_url, request.concurrency + 3, lock_timeout_ms=settings.lock_timeout_ms
    )
    try:
        if request.notify_url is not None:  # checked like a create's, before the job exists
            await check_cli_notify_url(settings, pool, request)
        store = PostgresJobQueue(
            pool, compiled=settings.compiled, max_row_errors=settings.max_row_errors
        )
        async with interrupt_on_signals(interrupt) as stop:
            outcome = await import_source(
                store,
                source,
                request,
                settings,
                progress,
                stop,
                sealed=sealed,
                local_path=local_path,
                announce=announce,
            )
        await _write_reports(store, settings, outcome, reports)
        return outcome
    finally:
        await pool.close()


async def run_resume(
    settings: Settings,
    job_id: uuid.UUID,
    progress: Progress | None,
    reports: Reports,
    interrupt: Interrupt,
    *,
    apply: bool = False,
) -> ImportOutcome:
    """``importer job resume``: run a cancelled, failed or abandoned job on in this process;
    with ``apply``, ``importer job apply``: import a preview resting in ``ready``."""
    pool = await connect_pool(
        settings.database_url, settings.concurrency + 3, lock_timeout_ms=settings.lock_timeout_ms
    )
    try:
        store = PostgresJobQueue(
            pool, compiled=settings.compiled, max_row_errors=settings.max_row_errors
        )
        async with interrupt_on_signals(interrupt) as stop:
            outcome = await (apply_job if apply else resume_job)(
                store,
                lambda job: resume_store(settings, job),
                job_id,
                settings,
                progress,
                stop,
                local_files=LocalObjectStore,
            )
        await _write_reports(store, settings, outcome, reports)
        return outcome
    finally:
        await pool.close()


async def _write_reports(
    store: Store, settings: Settings, outcome: ImportOutcome, reports: Reports
) -> None:
    if reports.errors_out is not None:
        with reports.errors_out.open("w", encoding="utf-8", newline="") as handle:
            if reports.errors_format != "source":
                await write_csv_report(store.row_issues(outcome.job_id), handle)
            else:
                await _write_source_report(store, settings, outcome.job_id, handle)
    if reports.duplicates_out is not None:
        with reports.duplicates_out.open("w", encoding="utf-8", newline="") as handle:
            await write_csv_duplicates(store.duplicates(outcome.job_id), handle)


async def _write_source_report(
    store: Store, settings: Settings, job_id: uuid.UUID, handle: TextIO
) -> None:
    job = await store.get_job(job_id)
    source = await available_source(job, resume_store(settings, job), LocalObjectStore)
    config = job_config(settings, job)
    async for text in source_report(job, source, config, store.row_issues(job.id)):
        handle.write(text)


def worker_owner(index: int) -> str:
    """A lease owner unique to this worker: host, process, index, and a random part."""
    return process_owner(str(index))


async def run_workers(settings: Settings, count: int) -> None:
    """``importer worker``: ``count`` workers until SIGINT or SIGTERM, then drain and release.

    The workers share one store (one LISTEN connection) and one pool sized for each running
    one import at a time: a connection per partition, plus one for leases and status changes.
    Their metrics are collected in the process's own registry (this command serves no HTTP).
    """
    # Imported here: prometheus_client adds ~0.04 s to every start of the command line.
    from importer.metrics import PipelineMetrics

    size = pool_size(settings, count, others=LISTEN_CONNECTIONS)
    pool = await connect_pool(settings.database_url, size, lock_timeout_ms=settings.lock_timeout_ms)
    store = PostgresJobQueue(
        pool,
        dsn=settings.database_url,
        compiled=settings.compiled,
        max_row_errors=settings.max_row_errors,
    )
    objects = object_store(settings)
    metrics = PipelineMetrics()
    try:
        async with stop_on_signals() as stop, accelerator_running(settings) as accelerator:
            observer = hinting(metrics, accelerator)
            async with fanout_running(
                settings,
                PostgresStore(
                    pool, compiled=settings.compiled, max_row_errors=settings.max_row_errors
                ),
                observer,
                stop.set,
            ) as fanout:
                workers = [
                    Worker(
                        store,
                        objects,
                        settings,
                        owner=worker_owner(i),
                        stop=stop,
                        observer=observer,
                        publisher=fanout,
                        local_files=LocalObjectStore,
                    )
                    for i in range(count)
                ]
                supervisor = Supervisor(stop)
                supervisor.start(
                    workers,
                    outbox_relay(settings, pool),
                    webhook_delivery(settings, pool, metrics.webhook_attempt),
                )
                await supervisor.run()
    finally:
        await store.close()
        await pool.close()


@dataclasses.dataclass(frozen=True, slots=True)
class Maintained:
    """What ``importer maintenance`` did: previews expired, stale undos failed, the retention
    sweep's count, webhook attempts made."""

    previews_expired: int
    undos_failed: int
    swept: maintenance.Swept
    webhook_attempts: int


async def run_maintenance(settings: Settings, now: dt.datetime) -> Maintained:
    """``importer maintenance``: the workers' sweeps once, for a deployment without a service
    (a systemd timer): expire the previews, the retention sweep, then deliver the webhooks due
    (one connection each way; the webhooks' own for LISTEN is not opened)."""
    pool = await connect_pool(settings.database_url, 2, lock_timeout_ms=settings.lock_timeout_ms)
    store = PostgresJobQueue(pool, compiled=settings.compiled)
    try:
        expired = await maintenance.expire_previews(store)
        undos_failed = await store.fail_stale_undos()  # an undo whose process stopped
        swept = await maintenance.sweep_retention(store, object_store(settings), settings, now)
        attempts = await webhook_delivery(settings, pool).deliver_once()
    finally:
        await store.close()
        await pool.close()
    return Maintained(expired, undos_failed, swept, attempts)


@contextlib.asynccontextmanager
async def fanout_running(
    settings: Settings,
    store: Store,
    observer: PipelineObserver | None = None,
    on_fatal: Callable[[], None] | None = None,
) -> AsyncIterator[BatchPublisher | None]:
    """Multi-instance mode when a broker is configured: consume chunk messages (a named task)
    and give the workers a batch publisher; without a broker, nothing (None). At exit the
    consumer finishes the deliveries in hand; run it around the workers, which stop first."""
    url = settings.rabbitmq_url
    if url is None:
        yield None
        return
    # Imported here: aio-pika is loaded only by processes that use a broker.
    from importer.adapters.rabbit.chunks import Fanout

    fanout_settings = FanoutSettings(
        max_retries=settings.max_retries, compiled=settings.compiled, limits=settings.limits
    )
    handler = ChunkHandler(store, fanout_settings, observer)
    topology = broker_topology(settings)
    fanout = Fanout(
        url,
        topology,
        handler,
        prefetch=settings.concurrency,
        name="importer-chunks",
        compiled=settings.compiled,
    )
    await fanout.open()
    stop = asyncio.Event()

    def ended(task: asyncio.Task[None]) -> None:
        if not stop.is_set():
            error = None if task.cancelled() else task.exception()
            log.error("chunk_consumer_died", error=repr(error or "returned without being stopped"))
            if on_fatal is not None:
                on_fatal()

    task = asyncio.create_task(fanout.consume(stop), name="chunk-consumer")
    task.add_done_callback(ended)
    try:
        yield fanout.batches
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)
        await fanout.close()


@contextlib.asynccontextmanager
async def accelerator_running(settings: Settings) -> AsyncIterator[RedisAccelerator | None]:
    """Redis when ``REDIS_URL`` is set, else None (no Redis at all). The client connects on
    first use: a Redis that is down at start-up delays nothing, and it is closed at exit."""
    if settings.redis_url is None:
        yield None
        return
    # Imported here: redis-py is loaded only by processes that use it.
    from importer.adapters.redis import RedisAccelerator

    accelerator = RedisAccelerator.from_url(settings.redis_url, settings.rate_limit_per_minute)
    probe = asyncio.create_task(
        first_contact(accelerator, settings.redis_url), name="redis-first-contact"
    )
    try:
        yield accelerator
    finally:
        probe.cancel()
        await asyncio.gather(probe, return_exceptions=True)
        await accelerator.aclose()


async def first_contact(accelerator: RedisAccelerator, url: str) -> None:
    """Say at once, without delaying the start, that the configured Redis does not answer:
    the process goes on without it (it is an accelerator), the operator learns why."""
    try:
        await asyncio.wait_for(accelerator.ping(), REDIS_FIRST_CONTACT_S)
    except (AcceleratorError, TimeoutError) as exc:
        log.warning(
            "redis_unreachable",
            url=mask_url(url),
            error=str(exc) or type(exc).__name__,
            hint="running without Redis; " + " ".join(HINTS["Redis"][1]),
        )


def hinting(metrics: PipelineObserver, accelerator: RedisAccelerator | None) -> PipelineObserver:
    """The pipeline's observer: the metrics, plus a progress hint per batch with Redis."""
    if accelerator is None:
        return metrics
    return HintingObserver(metrics, accelerator.offer_hint)


# The store's LISTEN connection (job notifications), held for the process's life.
LISTEN_CONNECTIONS = 1


def pool_size(settings: Settings, workers: int, *, others: int) -> int:
    """The one pool-size formula of a process running ``workers`` job workers.

    Each worker runs one import at a time: one connection per partition, one for its client's
    turn, one for leases and status changes; one for the outbox relay when a broker is
    configured; the chunk consumer's deliveries; and ``others`` for the process's own use (the
    API's requests, the LISTEN connection).
    """
    relay = 0 if settings.rabbitmq_url is None else 1
    per_worker = settings.concurrency + 2
    webhooks = 1  # the webhook delivery's claims and records (its attempts hold none)
    return workers * per_worker + relay + webhooks + fanout_connections(settings) + others


def fanout_connections(settings: Settings) -> int:
    """Pool connections the chunk consumer's deliveries hold (one each, prefetch of them)."""
    return 0 if settings.rabbitmq_url is None else settings.concurrency


def broker_topology(settings: Settings) -> Topology:
    """The queues of this deployment: their prefix, retry delay and lane wait from settings."""
    from importer.adapters.rabbit.broker import Topology

    return Topology.named(
        settings.queue_prefix,
        retry_delay_ms=settings.retry_delay_ms,
        lane_wait_ms=settings.lane_wait_ms,
    )


def outbox_relay(settings: Settings, pool: Pool) -> OutboxRelay | None:
    """The outbox relay on ``pool`` when a broker is configured (``RABBITMQ_URL``), else None.

    It connects (and declares the queues) in its own task, retrying: a broker that is down at
    start-up delays the messages, not the process.
    """
    url = settings.rabbitmq_url
    if url is None:
        return None
    # Imported here: aio-pika is loaded only by processes that use a broker.
    from importer.adapters.rabbit import broker

    topology = broker_topology(settings)

    async def open_publisher() -> MessagePublisher:
        return await broker.open_publisher(url, topology, name="importer-outbox-relay")

    outbox = PostgresOutbox(pool, dsn=settings.database_url)
    return OutboxRelay(outbox, open_publisher, topology.queue_for, list(topology.topics))


def webhook_delivery(
    settings: Settings, pool: Pool, on_attempt: AttemptObserver | None = None
) -> WebhookDelivery:
    """The completion webhooks' delivery on ``pool``: in every serve and worker process, with
    or without a broker."""
    # Imported here: httpx is loaded only by the processes that deliver.
    from importer.adapters.postgres.webhooks import PostgresWebhooks
    from importer.adapters.webhooks import HttpxWebhookSender, SystemResolver

    return WebhookDelivery(
        PostgresWebhooks(pool, dsn=settings.database_url),
        HttpxWebhookSender(),
        SystemResolver(),
        settings.webhook_policy,
        timeout_s=settings.webhook_timeout_s,
        allow_private=settings.webhook_allow_private,
        on_attempt=on_attempt,
    )


def dead_letter_queue(settings: Settings) -> DeadLetterQueue | None:
    """The chunk messages' dead-letter queue when a broker is configured, else None."""
    url = settings.rabbitmq_url
    if url is None:
        return None
    # Imported here: aio-pika is loaded only by processes that use a broker.
    from importer.adapters.rabbit.deadletters import AmqpDeadLetters

    return AmqpDeadLetters(url, broker_topology(settings))


@contextlib.asynccontextmanager
async def job_reader(settings: Settings) -> AsyncIterator[PostgresJobViews]:
    """The jobs as the owner's ``importer status`` and ``importer history`` read them."""
    pool = await connect_pool(settings.database_url, 1)
    try:
        yield PostgresJobViews(pool, retention_days=settings.retention_days)
    finally:
        await pool.close()


async def inspect_file(
    settings: Settings,
    path: Path,
    client_id: int,
    input_format: InputFormat,
    layout: dict[str, object] | None,
) -> ColumnsStep:
    """``importer inspect``: a local file's columns step for a client (its custom fields and
    memory from DATABASE_URL); only the file's head is read."""
    from importer.adapters.postgres.columns import PostgresColumns

    pool = await connect_pool(settings.database_url, 1)
    try:
        store = PostgresColumns(pool)
        fields = await store.custom_fields(client_id)
        known = ClientColumns(fields, memory_of(await store.memory(client_id)))
    finally:
        await pool.close()
    job = transient_job(path.name, input_format, layout)
    source = ObjectSource(LocalObjectStore(path.parent), path.name, size=None, pinned=None)
    head = await read_head(source, job, job_config(settings, job), HEAD_ROWS)
    return columns_step(head, known, layout)


@contextlib.asynccontextmanager
async def admin_service(settings: Settings) -> AsyncIterator[AdminService]:
    """The owner's operations for the command line, on DATABASE_URL and RABBITMQ_URL."""
    pool = await connect_pool(settings.database_url, 3)  # + the client's turn of an undo
    try:
        undo = (
            PostgresUndo(pool, retention_days=settings.retention_days),
            PostgresJobQueue(
                pool, compiled=settings.compiled, max_row_errors=settings.max_row_errors
            ),
        )
        yield AdminService(PostgresAdmin(pool), dead_letter_queue(settings), undo)
    finally:
        await pool.close()


@contextlib.asynccontextmanager
async def client_webhooks(
    settings: Settings,
) -> AsyncIterator[tuple[ClientWebhooks, Resolver]]:
    """The clients' webhook settings on DATABASE_URL, and the resolver that checks a target."""
    from importer.adapters.postgres.webhooks import PostgresClientWebhooks
    from importer.adapters.webhooks import SystemResolver

    pool = await connect_pool(settings.database_url, 1)
    try:
        yield PostgresClientWebhooks(pool), SystemResolver()
    finally:
        await pool.close()
