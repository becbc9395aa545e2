"""The HTTP edge: FastAPI on uvicorn, built by :func:`create_app` from injected settings.

The lifespan owns every resource — the database pool, the object store, the token verifier and
the job workers — creating them at start-up and closing them at shutdown; nothing here is global
and nothing reads ``os.environ``. Routes are thin: parse HTTP, call :class:`ImportService`, shape
the answer. Errors have one JSON shape (``{"error", "message"}``; validation: HTTP 400 with a
list of ``{"field", "message"}``) and never carry a stack trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import structlog
from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from importer import wiring
from importer.adapters.postgres.admin import PostgresAdmin
from importer.adapters.postgres.catalog import CatalogStore
from importer.adapters.postgres.pool import connect_pool
from importer.adapters.postgres.queue import PostgresJobQueue
from importer.adapters.postgres.store import PostgresStore
from importer.adapters.postgres.views import PostgresJobViews
from importer.core.errors import (
    AuthenticationError,
    BrokerError,
    ChecksumMismatchError,
    IllegalTransitionError,
    ImportAlreadyAppliedError,
    ImporterError,
    InvalidObjectKeyError,
    InvalidRequestError,
    JobNotFoundError,
    JobNotReadyError,
    LayoutError,
    LayoutNotFoundError,
    NoBrokerError,
    ObjectNotFoundError,
    ObjectTooLargeError,
    PermissionDeniedError,
    RateLimitedError,
    RequestTooLargeError,
    StorageError,
    StoreError,
    UnsupportedMediaTypeError,
    UploadMissingError,
)
from importer.core.models import JobView, StoredLayout
from importer.core.objects import StoredObject
from importer.core.options import MAX_INT8, NUL_MESSAGE
from importer.core.principals import Principal
from importer.http import console
from importer.http import openapi as doc
from importer.http.auth import TokenVerifier, parse_bearer
from importer.http.forms import FORM_OVERHEAD_BYTES, FilePart, boundary_of, read_form
from importer.http.priority import PriorityMiddleware, RequestPriority
from importer.http.streams import (
    Body,
    answer_when_too_large,
    csv_report,
    jsonl_report,
    progress_events,
)
from importer.metrics import ApiMetrics, MetricsMiddleware
from importer.ports import ObjectStore
from importer.services.admin import (
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
    AdminService,
    page_document,
    removed_document,
    replay_document,
)
from importer.services.documents import job_document
from importer.services.imports import ImportService, PlannedUpload, parse_history_query
from importer.services.relay import OutboxRelay
from importer.services.worker import Worker
from importer.settings import Settings

if TYPE_CHECKING:
    from importer.adapters.redis import RedisAccelerator

log = structlog.get_logger(__name__)

# Connections the API's own requests may hold beside the workers' (one per import partition).
API_CONNECTIONS = 8
# A JSON request body (options, a layout) is small; larger ones are refused unread.
MAX_JSON_BYTES = 1024 * 1024
# An Idempotency-Key is an opaque client token; the cap bounds what we store.
MAX_OPERATION_ID_CHARS = 200
# The storage probe of /readyz looks up this key: "not found" means the store answers.
READY_PROBE_KEY = "readyz/probe"
READY_PROBE_TIMEOUT_S = 5.0
# Redis is an accelerator: readiness reports it (`degraded` when away) but never fails on it.
OPTIONAL_CHECKS = frozenset({"redis"})
REDIS_PROBE_TIMEOUT_S = 0.5


# --- resources owned by the lifespan ----------------------------------------------------------


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


@dataclass(slots=True)
class Resources:
    """What the lifespan created, for the routes (``request.app.state.resources``)."""

    settings: Settings
    service: ImportService
    verifier: TokenVerifier
    catalog: CatalogStore
    objects: ObjectStore
    workers: WorkerGroup
    metrics: ApiMetrics
    relay: OutboxRelay | None = None  # with a broker (RABBITMQ_URL) only
    accelerator: RedisAccelerator | None = None  # with Redis (REDIS_URL) only
    admin: AdminService | None = None  # the owner's operations
    draining: asyncio.Event = field(default_factory=asyncio.Event)

    def drain(self) -> None:
        self.draining.set()
        self.workers.drain()


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


def begin_drain(app: FastAPI) -> None:
    """SIGTERM: stop workers taking jobs and end event streams, before connections close."""
    resources: Resources | None = getattr(app.state, "resources", None)
    if resources is not None:
        resources.drain()


def pool_size(settings: Settings) -> int:
    """Each worker runs one import at a time: one connection per partition, one for its
    client's turn, plus one; and one for the outbox relay when a broker is configured."""
    relay = 0 if settings.rabbitmq_url is None else 1
    workers = settings.workers_per_process * (settings.concurrency + 2)
    return workers + API_CONNECTIONS + relay + wiring.fanout_connections(settings)


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
    queue = PostgresJobQueue(pool, dsn=settings.database_url)
    try:
        store = PostgresStore(pool)
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

            def make_worker(owner: str, stop: asyncio.Event) -> Worker:
                return Worker(
                    queue,
                    objects,
                    settings,
                    owner=owner,
                    stop=stop,
                    throttle=app.state.priority,
                    observer=observer,
                    publisher=fanout,
                )

            workers = WorkerGroup(make_worker, settings.workers_per_process, on_fatal, metrics)
            service = ImportService(PostgresJobViews(pool), catalog, objects, settings)
            relay = wiring.outbox_relay(settings, pool)
            app.state.resources = Resources(
                settings, service, verifier, catalog, objects, workers, metrics, relay, accelerator
            )
            app.state.resources.admin = AdminService(
                PostgresAdmin(pool), wiring.dead_letter_queue(settings)
            )
            if accelerator is not None:
                accelerator.hub.start()
            workers.start()
            relay_task = None if relay is None else start_relay(relay, on_fatal)
            try:
                yield
            finally:
                await workers.stop()  # first: the chunk consumer (at the block's end) then
                log.info("workers_drained")  # finishes its deliveries
                if relay is not None and relay_task is not None:  # last: it publishes outbox
                    relay.stop()
                    await asyncio.gather(relay_task, return_exceptions=True)
    finally:
        await queue.close()
        await pool.close()


def _resources(request: Request) -> Resources:
    resources: Resources = request.app.state.resources
    return resources


async def _service(request: Request) -> ImportService:
    # async: FastAPI runs a plain-def dependency in its thread pool, a thread hop per request.
    return _resources(request).service


_bearer = HTTPBearer(
    auto_error=False,
    description="A JWT with sub (user), client_id (tenant) and permissions.",
)


async def _caller(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> Principal:
    """The verified caller; the declared scheme documents it, our parser decides."""
    token = parse_bearer(request.headers.get("authorization"))
    return _resources(request).verifier.verify(token)


async def _creator(
    request: Request, principal: Annotated[Principal, Depends(_caller)]
) -> Principal:
    """The caller of a route that creates an import, within its client's rate limit (with
    Redis only; it fails open: Redis down or slow lets the request through)."""
    accelerator = _resources(request).accelerator
    if accelerator is not None:
        decision = await accelerator.limiter.admit(principal.client_id)
        if not decision.allowed:
            raise RateLimitedError(decision.retry_after_s)
    return principal


Caller = Annotated[Principal, Depends(_caller)]
Creator = Annotated[Principal, Depends(_creator)]
Service = Annotated[ImportService, Depends(_service)]
JobId = Annotated[uuid.UUID, Path(description="the import's id")]
LayoutId = Annotated[int, Path(ge=1, le=MAX_INT8, description="the layout's id")]


# --- responses --------------------------------------------------------------------------------


def json_response(document: object, status: int = 200, **headers: str) -> Response:
    return Response(
        orjson.dumps(document), status_code=status, media_type="application/json", headers=headers
    )


def _job(service: ImportService, view: JobView, status: int = 200) -> Response:
    return json_response(job_document(view, service.clock()), status)


def _layout_document(layout: StoredLayout) -> dict[str, object]:
    return {
        "id": layout.id,
        "name": layout.name,
        "document": layout.document,
        "created_at": layout.created_at.isoformat(),
        "updated_at": layout.updated_at.isoformat(),
    }


# --- request bodies ---------------------------------------------------------------------------


def _refuse_large(request: Request, limit: int) -> None:
    """413 from the Content-Length alone, before a byte of the body is read."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestTooLargeError(f"the request body is larger than {limit} bytes")


async def _json_object(request: Request, *, optional: bool = False) -> dict[str, object]:
    _refuse_large(request, MAX_JSON_BYTES)
    body = bytearray()
    async for block in request.stream():
        body += block
        if len(body) > MAX_JSON_BYTES:
            raise RequestTooLargeError(f"the JSON body is larger than {MAX_JSON_BYTES} bytes")
    if optional and not body.strip():
        return {}
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidRequestError([("body", "is not valid JSON")]) from None
    if not isinstance(document, dict):
        raise InvalidRequestError([("body", "must be a JSON object")])
    return document


def _is_json(request: Request) -> bool:
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return kind == "application/json"


def _operation_id(request: Request, body: dict[str, object]) -> str:
    given = request.headers.get("idempotency-key") or body.get("operation_id")
    if given is None:
        return str(uuid.uuid4())
    if not isinstance(given, str) or not 1 <= len(given) <= MAX_OPERATION_ID_CHARS:
        raise InvalidRequestError(
            [("operation_id", f"must be a string of 1 to {MAX_OPERATION_ID_CHARS} characters")]
        )
    if "\x00" in given:
        raise InvalidRequestError([("operation_id", NUL_MESSAGE)])
    return given


async def _multipart_import(request: Request, principal: Principal, *, hsm: bool) -> JobView:
    """Stream the file part to the object store while parsing the form; then queue the job.

    The file is hashed on its way to the store; fields may come before or after it. On any
    failure before the job exists, the stored object is removed.
    """
    resources = _resources(request)
    service = resources.service
    service.check_upload(principal, hsm=hsm)  # not a byte of the body read without permission
    limit = resources.settings.max_upload_bytes
    _refuse_large(request, limit + FORM_OVERHEAD_BYTES)
    boundary = boundary_of(request.headers.get("content-type"))
    assert boundary is not None
    planned: PlannedUpload | None = None
    stored: StoredObject | None = None
    body = Body(request, resources.metrics)

    async def on_file(part: FilePart, chunks: AsyncIterator[bytes]) -> StoredObject:
        nonlocal planned, stored
        planned = service.plan_upload(principal, part.filename)
        stored = await service.receive(planned, chunks)
        return stored

    try:
        async with answer_when_too_large(body):
            fields, _ = await read_form(
                body.blocks(), boundary, on_file, max_body_bytes=limit + FORM_OVERHEAD_BYTES
            )
    except BaseException:
        if planned is not None and stored is not None:
            await service.discard(planned)
        raise
    if planned is None or stored is None:
        raise InvalidRequestError([("file", "is required")])
    view = await service.queue_received(
        principal,
        planned,
        stored,
        fields,
        hsm=hsm,
        operation_id=request.headers.get("idempotency-key"),
    )
    resources.metrics.imports_created.labels("hsm" if hsm else "multipart").inc()
    return view


# --- routes: imports --------------------------------------------------------------------------

router = APIRouter()
_IMPORT_BODY = doc.request_body(
    {"multipart/form-data": doc.MultipartImportForm, "application/json": doc.ImportFromKeyBody}
)


@router.post(
    "/v1/imports",
    status_code=202,
    tags=["imports"],
    summary="Create an import: upload a file (multipart) or point at a stored key (JSON)",
    description=(
        "multipart/form-data: the file is streamed to storage and the job is queued (202, "
        "`queued`). application/json: a file already stored under `<client_id>/` becomes a job "
        "`uploaded` (201); start it with POST /v1/imports/{job_id}/start."
    ),
    openapi_extra=_IMPORT_BODY,
    responses={
        202: {"model": doc.JobBody, "description": "multipart: the queued job"},
        201: {"model": doc.JobBody, "description": "JSON: the job, uploaded"},
        **doc.error_responses(413, 415, 429),
    },
)
async def create_import(request: Request, principal: Creator, service: Service) -> Response:
    if boundary_of(request.headers.get("content-type")) is not None:
        view = await _multipart_import(request, principal, hsm=False)
        return _job(service, view, 202)
    if _is_json(request):
        view = await service.create_from_key(principal, await _json_object(request))
        _resources(request).metrics.imports_created.labels("key").inc()
        return _job(service, view, 201)
    raise UnsupportedMediaTypeError("send multipart/form-data or application/json")


@router.get(
    "/v1/imports",
    tags=["imports"],
    summary="Import history, newest first",
    responses={200: {"model": doc.JobPageBody}, **doc.error_responses()},
)
async def list_imports(
    principal: Caller,
    service: Service,
    user_id: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[list[str] | None, Query(description="repeatable")] = None,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
    limit: Annotated[str | None, Query(description="1 to 100, default 20")] = None,
) -> Response:
    query = parse_history_query(user_id, status or [], cursor, limit)
    page = await service.history(principal, query)
    now = service.clock()
    return json_response(
        {
            "items": [job_document(view, now) for view in page.items],
            "next_cursor": page.next_cursor,
        }
    )


@router.get(
    "/v1/imports/{job_id}",
    tags=["imports"],
    summary="An import's status, counters, progress and ETA",
    responses={200: {"model": doc.JobBody}, **doc.error_responses(404)},
)
async def get_import(job_id: JobId, principal: Caller, service: Service) -> Response:
    return _job(service, await service.view(principal, job_id))


@router.post(
    "/v1/imports/{job_id}/start",
    status_code=202,
    tags=["imports"],
    summary="Queue an uploaded import (idempotent)",
    description=(
        "Starting a queued job again changes nothing but records the operation id "
        "(Idempotency-Key header or body). 409 import_already_applied once importing or ended."
    ),
    openapi_extra={
        "requestBody": {
            "required": False,
            "content": {"application/json": {"schema": doc.StartBody.model_json_schema()}},
        }
    },
    responses={202: {"model": doc.JobBody}, **doc.error_responses(404, 409)},
)
async def start_import(
    job_id: JobId, request: Request, principal: Caller, service: Service
) -> Response:
    body = await _json_object(request, optional=True)
    view = await service.start(principal, job_id, _operation_id(request, body))
    return _job(service, view, 202)


@router.post(
    "/v1/imports/{job_id}/uploaded",
    tags=["uploads"],
    summary="Check the uploaded file against the sealed size and sha256",
    description="`uploaded` when they match; the job `failed` with checksum_mismatch if not.",
    responses={200: {"model": doc.JobBody}, **doc.error_responses(404, 409)},
)
async def confirm_upload(job_id: JobId, principal: Caller, service: Service) -> Response:
    return _job(service, await service.confirm_upload(principal, job_id))


@router.post(
    "/v1/imports/{job_id}/cancel",
    status_code=202,
    tags=["imports"],
    summary="Cancel an import (cooperative: between chunks)",
    responses={202: {"model": doc.JobBody}, **doc.error_responses(404, 409)},
)
async def cancel_import(job_id: JobId, principal: Caller, service: Service) -> Response:
    return _job(service, await service.cancel(principal, job_id), 202)


@router.get(
    "/v1/imports/{job_id}/events",
    tags=["imports"],
    summary="Live progress as Server-Sent Events",
    description="`event: progress` (the job) on change, `event: done` at the end; heartbeats.",
    responses={
        200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}},
        **doc.error_responses(404),
    },
)
async def import_events(
    job_id: JobId, request: Request, principal: Caller, service: Service
) -> StreamingResponse:
    await service.view(principal, job_id)  # 404 before the stream starts
    resources = _resources(request)
    hints = None if resources.accelerator is None else resources.accelerator.hub
    stream = progress_events(service, principal, job_id, resources.draining, hints)
    return StreamingResponse(
        stream,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/v1/imports/{job_id}/errors",
    tags=["imports"],
    summary="The per-row error report (CSV, formula-safe; or JSONL)",
    responses={
        200: {
            "content": {
                "text/csv": {"schema": {"type": "string"}},
                "application/x-ndjson": {"schema": {"type": "string"}},
            }
        },
        **doc.error_responses(404),
    },
)
async def import_errors(
    job_id: JobId,
    principal: Caller,
    service: Service,
    report_format: Annotated[str, Query(alias="format", pattern="^(csv|jsonl)$")] = "csv",
) -> StreamingResponse:
    issues = await service.row_issues(principal, job_id)
    csv_format = report_format == "csv"
    return StreamingResponse(
        csv_report(issues) if csv_format else jsonl_report(issues),
        media_type="text/csv; charset=utf-8" if csv_format else "application/x-ndjson",
        headers={
            "Content-Disposition": (
                f'attachment; filename="import-{job_id}-errors.{report_format}"'
            )
        },
    )


# --- routes: uploads --------------------------------------------------------------------------


@router.post(
    "/v1/uploads",
    status_code=201,
    tags=["uploads"],
    summary="Announce a file: a job `uploading` and the URL to PUT it to",
    description=(
        "The URL is the object store's presigned PUT when it has one (S3), else this server's "
        "PUT /v1/uploads/{job_id} (with the bearer token). Then POST /v1/imports/{job_id}/"
        "uploaded, then /start."
    ),
    openapi_extra=doc.request_body({"application/json": doc.UploadRequestBody}),
    responses={201: {"model": doc.UploadCreatedBody}, **doc.error_responses(413, 415, 429)},
)
async def create_upload(request: Request, principal: Creator, service: Service) -> Response:
    if not _is_json(request):
        raise UnsupportedMediaTypeError("send application/json")
    view, target = await service.create_upload(principal, await _json_object(request))
    _resources(request).metrics.imports_created.labels("upload_url").inc()
    upload = {
        "url": target.url,
        "method": target.method,
        "expires_in_s": target.expires_in_s,
        "presigned": target.presigned,
    }
    return json_response({"job": job_document(view, service.clock()), "upload": upload}, 201)


@router.put(
    "/v1/uploads/{job_id}",
    tags=["uploads"],
    summary="This server's upload URL: the body is the file (streamed, up to its sealed size)",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
    responses={200: {"model": doc.StoredObjectBody}, **doc.error_responses(404, 409, 413)},
)
async def put_upload(
    job_id: JobId, request: Request, principal: Caller, service: Service
) -> Response:
    _refuse_large(request, await service.upload_limit(principal, job_id))
    body = Body(request, _resources(request).metrics)
    async with answer_when_too_large(body):
        stored = await service.receive_put(principal, job_id, body.blocks())
    return json_response({"key": stored.key, "size": stored.size, "sha256": stored.sha256})


# --- routes: HSM ------------------------------------------------------------------------------


@router.post(
    "/v1/hsm/intents/import",
    status_code=202,
    tags=["hsm"],
    summary="Import a file and hold a message firing until the import completes",
    description="Needs HSM.CREATE. The firing intent is released when the import completes.",
    openapi_extra=doc.request_body({"multipart/form-data": doc.HsmImportForm}),
    responses={202: {"model": doc.JobBody}, **doc.error_responses(413, 415, 429)},
)
async def hsm_import(request: Request, principal: Creator, service: Service) -> Response:
    if boundary_of(request.headers.get("content-type")) is None:
        raise UnsupportedMediaTypeError("send multipart/form-data")
    view = await _multipart_import(request, principal, hsm=True)
    return _job(service, view, 202)


# --- routes: layouts --------------------------------------------------------------------------

_LAYOUT_BODY = doc.request_body({"application/json": doc.LayoutBody})


@router.post(
    "/v1/layouts",
    status_code=201,
    tags=["layouts"],
    summary="Store a layout (the CLI's --layout document)",
    openapi_extra=_LAYOUT_BODY,
    responses={201: {"model": doc.LayoutOut}, **doc.error_responses()},
)
async def create_layout(request: Request, principal: Caller, service: Service) -> Response:
    layout = await service.create_layout(principal, await _json_object(request))
    return json_response(_layout_document(layout), 201)


@router.get(
    "/v1/layouts",
    tags=["layouts"],
    summary="The tenant's layouts",
    responses={200: {"model": doc.LayoutListBody}, **doc.error_responses()},
)
async def list_layouts(principal: Caller, service: Service) -> Response:
    layouts = await service.list_layouts(principal)
    return json_response({"items": [_layout_document(layout) for layout in layouts]})


@router.get(
    "/v1/layouts/{layout_id}",
    tags=["layouts"],
    summary="One layout",
    responses={200: {"model": doc.LayoutOut}, **doc.error_responses(404)},
)
async def get_layout(layout_id: LayoutId, principal: Caller, service: Service) -> Response:
    return json_response(_layout_document(await service.get_layout(principal, layout_id)))


@router.put(
    "/v1/layouts/{layout_id}",
    tags=["layouts"],
    summary="Replace a layout",
    openapi_extra=_LAYOUT_BODY,
    responses={200: {"model": doc.LayoutOut}, **doc.error_responses(404)},
)
async def update_layout(
    layout_id: LayoutId, request: Request, principal: Caller, service: Service
) -> Response:
    layout = await service.update_layout(principal, layout_id, await _json_object(request))
    return json_response(_layout_document(layout))


@router.delete(
    "/v1/layouts/{layout_id}",
    status_code=204,
    tags=["layouts"],
    summary="Delete a layout (jobs keep the copy they were created with)",
    responses=doc.error_responses(404),
)
async def delete_layout(layout_id: LayoutId, principal: Caller, service: Service) -> Response:
    await service.delete_layout(principal, layout_id)
    return Response(status_code=204)


# --- routes: owner operations (IMPORT.ADMIN; seed 001's runbook) --------------------------------


async def _admin_service(request: Request) -> AdminService:
    admin = _resources(request).admin
    assert admin is not None
    return admin


Admin = Annotated[AdminService, Depends(_admin_service)]


@router.post(
    "/v1/imports/{job_id}/requeue",
    status_code=202,
    tags=["admin"],
    summary="Requeue an ended import (IMPORT.ADMIN): its next run resumes from the ledger",
    description=(
        "A `failed` or `cancelled` import, or an abandoned one (running, its lease expired), "
        "goes back to `queued` with its file and sealed checksum; the next run skips the chunks "
        "its ledger holds. A completed import only after DELETE /v1/imports/{job_id}/data (409 "
        "import_already_applied before); a running one (live lease): 409 illegal_transition. "
        "Each run finalizes (and notifies) exactly once."
    ),
    responses={202: {"model": doc.RequeuedBody}, **doc.error_responses(404, 409)},
)
async def requeue_import(
    job_id: JobId, request: Request, principal: Caller, service: Service, admin: Admin
) -> Response:
    requeued = await admin.requeue(principal, job_id, _operation_id(request, {}))
    view = await service.view(principal, job_id)
    document = {"job": job_document(view, service.clock()), "run": requeued.run}
    return json_response(document, 202)


@router.delete(
    "/v1/imports/{job_id}/data",
    tags=["admin"],
    summary="Remove an ended import's data (IMPORT.ADMIN; idempotent)",
    description=(
        "Soft-deletes the contacts the import created (with their channels) and clears its "
        "ledger and per-row report, in one transaction; a repeat removes nothing more. Then "
        "POST /v1/imports/{job_id}/requeue imports the stored file again. 409 while it runs."
    ),
    responses={200: {"model": doc.RemovedDataBody}, **doc.error_responses(404, 409)},
)
async def remove_import_data(
    job_id: JobId, principal: Caller, service: Service, admin: Admin
) -> Response:
    removed = await admin.remove_data(principal, job_id)
    view = await service.view(principal, job_id)
    counts = removed_document(removed)
    del counts["job_id"]
    return json_response({"job": job_document(view, service.clock()), "removed": counts})


@router.get(
    "/v1/admin/dead-letters",
    tags=["admin"],
    summary="The client's dead-lettered chunk messages, oldest first (IMPORT.ADMIN)",
    description=(
        "A bounded peek: messages are taken unacknowledged and handed back, none is consumed. "
        "Multi-instance mode only: without RABBITMQ_URL, 409 no_broker."
    ),
    responses={200: {"model": doc.DeadLetterListBody}, **doc.error_responses(409)},
)
async def list_dead_letters(
    principal: Caller,
    admin: Admin,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
) -> Response:
    return json_response(page_document(await admin.dead_letters(principal, limit)))


@router.post(
    "/v1/admin/dead-letters/replay",
    tags=["admin"],
    summary="Replay the client's dead letters of running imports (IMPORT.ADMIN)",
    description=(
        "Each is republished to the main queue (confirmed, its attempt count carried on), then "
        "removed from the dead-letter queue. A letter of an ended import stays (skipped, "
        "job_ended): requeue the import instead. Without RABBITMQ_URL, 409 no_broker."
    ),
    responses={200: {"model": doc.ReplayBody}, **doc.error_responses(409)},
)
async def replay_dead_letters(
    principal: Caller,
    admin: Admin,
    job_id: Annotated[uuid.UUID | None, Query(description="only this import's")] = None,
) -> Response:
    return json_response(replay_document(await admin.replay(principal, job_id)))


# --- routes: operations -----------------------------------------------------------------------


@router.get("/healthz", tags=["operations"], summary="The process is alive")
async def healthz() -> Response:
    return json_response({"status": "ok"})


@router.get(
    "/readyz",
    tags=["operations"],
    summary="The database and the object store answer; workers run; not draining",
    responses={503: {"model": doc.ErrorBody}},
)
async def readyz(request: Request) -> Response:
    resources = _resources(request)
    checks = {
        "database": await _probe(resources.catalog.ping()),
        "storage": await _probe(_storage_probe(resources.objects)),
        "workers": "ok" if resources.workers.healthy else "stopped",
    }
    if resources.draining.is_set():
        checks["server"] = "draining"
    if resources.accelerator is not None:  # optional: reported, never failing readiness
        checks["redis"] = await _probe(resources.accelerator.ping(), REDIS_PROBE_TIMEOUT_S)
    failing = sorted(
        name for name, state in checks.items() if state != "ok" and name not in OPTIONAL_CHECKS
    )
    if failing:
        message = "not ready: " + ", ".join(f"{name} {checks[name]}" for name in failing)
        return json_response({"error": "not_ready", "message": message, "checks": checks}, 503)
    degraded = any(checks.get(name, "ok") != "ok" for name in OPTIONAL_CHECKS)
    return json_response({"status": "degraded" if degraded else "ready", "checks": checks})


async def _storage_probe(objects: ObjectStore) -> None:
    with contextlib.suppress(ObjectNotFoundError):
        await objects.stat(READY_PROBE_KEY)


async def _probe(check: Awaitable[None], timeout_s: float = READY_PROBE_TIMEOUT_S) -> str:
    try:
        await asyncio.wait_for(check, timeout_s)
    except (ImporterError, TimeoutError, OSError) as exc:
        log.warning("readiness_probe_failed", error=repr(exc))
        return "unavailable"
    return "ok"


@router.get("/metrics", tags=["operations"], summary="Prometheus metrics (text format)")
async def metrics(request: Request) -> Response:
    body = _resources(request).metrics.exposition()
    return Response(body, media_type=CONTENT_TYPE_LATEST)


# --- errors -----------------------------------------------------------------------------------

# Most specific first. 5xx messages are ours: driver and storage texts stay in the logs.
_ERRORS: tuple[tuple[type[ImporterError], int, str], ...] = (
    (AuthenticationError, 401, "unauthorized"),
    (PermissionDeniedError, 403, "forbidden"),
    (JobNotFoundError, 404, "not_found"),
    (LayoutNotFoundError, 404, "not_found"),
    (ImportAlreadyAppliedError, 409, "import_already_applied"),
    (JobNotReadyError, 409, "not_uploaded"),
    (IllegalTransitionError, 409, "illegal_transition"),
    (UploadMissingError, 409, "upload_missing"),
    (NoBrokerError, 409, "no_broker"),
    (ObjectTooLargeError, 413, "too_large"),
    (RequestTooLargeError, 413, "too_large"),
    (UnsupportedMediaTypeError, 415, "unsupported_media_type"),
    (LayoutError, 400, "invalid_layout"),
    (InvalidObjectKeyError, 400, "invalid_key"),
    (ChecksumMismatchError, 409, "checksum_mismatch"),
    (ObjectNotFoundError, 404, "not_found"),
)
_UNAVAILABLE: tuple[tuple[type[ImporterError], str, str], ...] = (
    (StoreError, "database_unavailable", "the database is unavailable; retry later"),
    (StorageError, "storage_unavailable", "the object store is unavailable; retry later"),
    (BrokerError, "broker_unavailable", "the message broker is unavailable; retry later"),
)
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


def error_response(exc: ImporterError) -> Response:
    if isinstance(exc, InvalidRequestError):
        problems = [{"field": name, "message": message} for name, message in exc.problems]
        return json_response(problems, 400)
    if isinstance(exc, RateLimitedError):
        retry_after = str(exc.retry_after_s)
        return json_response(
            {"error": "rate_limited", "message": str(exc)}, 429, **{"Retry-After": retry_after}
        )
    for kind, status, code in _ERRORS:
        if isinstance(exc, kind):
            headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
            return json_response({"error": code, "message": str(exc)}, status, **headers)
    for kind, code, message in _UNAVAILABLE:
        if isinstance(exc, kind):
            log.warning("request_failed", error=code, detail=str(exc))
            return json_response({"error": code, "message": message}, 503)
    log.error("request_failed", error=repr(exc))
    return json_response({"error": "internal_error", "message": "internal error"}, 500)


def _field_name(location: tuple[Any, ...]) -> str:
    parts = [str(p) for p in location]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "request"


def _install_error_handlers(app: FastAPI) -> None:
    async def importer_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, ImporterError)
        return error_response(exc)

    async def validation_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        problems = [
            {"field": _field_name(tuple(e.get("loc", ()))), "message": str(e.get("msg", ""))}
            for e in exc.errors()
        ]
        return json_response(problems, 400)

    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = "no such route" if exc.status_code == 404 else str(exc.detail)
        headers = dict(exc.headers or {})
        return json_response({"error": code, "message": message}, exc.status_code, **headers)

    async def unexpected(_: Request, exc: Exception) -> Response:
        log.error("unhandled_error", exc_info=exc)
        return json_response({"error": "internal_error", "message": "internal error"}, 500)

    async def client_gone(_: Request, __: Exception) -> Response:
        log.info("client_disconnected")
        return json_response({"error": "client_disconnected", "message": "the body ended"}, 400)

    app.add_exception_handler(ImporterError, importer_error)
    app.add_exception_handler(ClientDisconnect, client_gone)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


# --- the app ----------------------------------------------------------------------------------


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
        version="0.1.0",
        summary="Imports huge contact lists (CSV/JSONL) into PostgreSQL, exactly.",
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.priority = RequestPriority()  # the workers' imports give way to requests
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(PriorityMiddleware, priority=app.state.priority)
    _install_error_handlers(app)
    app.include_router(router)
    app.include_router(console.router)
    return app
