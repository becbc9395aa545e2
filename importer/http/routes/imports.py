"""Routes of the ``imports`` tag: create an import (multipart upload or a stored key), its
history, status, start, cancel, live events and per-row error report.

``POST /v1/imports/{job_id}/uploaded`` (tag ``uploads``) stays here, between start and cancel:
the OpenAPI document lists paths in the order routes are added, and that order is kept.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse

from importer.core.errors import InvalidRequestError, UnsupportedMediaTypeError
from importer.core.history import parse_history_query
from importer.core.models import InputFormat, JobStatus, JobView
from importer.core.objects import StoredObject
from importer.core.principals import Principal
from importer.http import openapi as doc
from importer.http.bodies import (
    is_json,
    job_response,
    json_object,
    json_response,
    operation_id,
    refuse_large,
)
from importer.http.deps import Caller, Creator, JobId, Service, resources_of
from importer.http.forms import FORM_OVERHEAD_BYTES, FilePart, boundary_of, read_form
from importer.http.streams import (
    Body,
    answer_when_too_large,
    csv_duplicates,
    csv_report,
    jsonl_duplicates,
    jsonl_report,
    progress_events,
    text_chunks,
)
from importer.services.documents import job_document
from importer.services.imports import ImportService, PlannedUpload

router = APIRouter()


async def multipart_import(request: Request, principal: Principal, *, hsm: bool) -> JobView:
    """Stream the file part to the object store while parsing the form; then queue the job.

    The file is hashed on its way to the store; fields may come before or after it. On any
    failure before the job exists, the stored object is removed.
    """
    resources = resources_of(request)
    service = resources.service
    service.check_upload(principal, hsm=hsm)  # not a byte of the body read without permission
    limit = resources.settings.max_upload_bytes
    refuse_large(request, limit + FORM_OVERHEAD_BYTES)
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


# --- routes -----------------------------------------------------------------------------------

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
        "`queued`), or with `start=false` left `uploaded` (201) for its columns step (GET/PUT "
        "/v1/imports/{job_id}/columns, then /start). application/json: a file already stored "
        "under `<client_id>/` becomes a job `uploaded` (201); start it with POST "
        "/v1/imports/{job_id}/start."
    ),
    openapi_extra=_IMPORT_BODY,
    responses={
        202: {"model": doc.JobBody, "description": "multipart: the queued job"},
        201: {
            "model": doc.JobBody,
            "description": "JSON, or multipart with start=false: the job, uploaded",
        },
        **doc.error_responses(413, 415, 429),
    },
)
async def create_import(request: Request, principal: Creator, service: Service) -> Response:
    if boundary_of(request.headers.get("content-type")) is not None:
        view = await multipart_import(request, principal, hsm=False)
        held = view.status is JobStatus.UPLOADED  # start=false: its columns step first
        return job_response(service, view, 201 if held else 202)
    if is_json(request):
        view = await service.create_from_key(principal, await json_object(request))
        resources_of(request).metrics.imports_created.labels("key").inc()
        return job_response(service, view, 201)
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
    return job_response(service, await service.view(principal, job_id))


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
    body = await json_object(request, optional=True)
    view = await service.start(principal, job_id, operation_id(request, body))
    return job_response(service, view, 202)


@router.post(
    "/v1/imports/{job_id}/apply",
    status_code=202,
    tags=["imports"],
    summary="Apply a preview: import it, planned again against the contacts as they are now",
    description=(
        "Only an import created with `preview: true` and resting in `ready` (its `preview` "
        "document shown) can be applied: it is queued for the workers, and once it ends its "
        "status says whether its counters differ from the preview's "
        "(`counters_differ_from_preview`: something wrote in between). 409 preview_expired "
        "past its time to live (it is cancelled), not_a_preview, import_already_applied."
    ),
    responses={202: {"model": doc.JobBody}, **doc.error_responses(404, 409)},
)
async def apply_import(
    job_id: JobId, request: Request, principal: Caller, service: Service
) -> Response:
    body = await json_object(request, optional=True)
    view = await service.apply(principal, job_id, operation_id(request, body))
    return job_response(service, view, 202)


@router.post(
    "/v1/imports/{job_id}/uploaded",
    tags=["uploads"],
    summary="Check the uploaded file against the sealed size and sha256",
    description="`uploaded` when they match; the job `failed` with checksum_mismatch if not.",
    responses={200: {"model": doc.JobBody}, **doc.error_responses(404, 409)},
)
async def confirm_upload(job_id: JobId, principal: Caller, service: Service) -> Response:
    return job_response(service, await service.confirm_upload(principal, job_id))


@router.post(
    "/v1/imports/{job_id}/cancel",
    status_code=202,
    tags=["imports"],
    summary="Cancel an import (cooperative: between chunks)",
    responses={202: {"model": doc.JobBody}, **doc.error_responses(404, 409)},
)
async def cancel_import(job_id: JobId, principal: Caller, service: Service) -> Response:
    return job_response(service, await service.cancel(principal, job_id), 202)


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
    resources = resources_of(request)
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
    summary="The per-row error report (CSV, formula-safe; JSONL; or the rejected rows as sent)",
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
    report_format: Annotated[str, Query(alias="format", pattern="^(csv|jsonl|source)$")] = "csv",
) -> StreamingResponse:
    if report_format == "source":
        return await _source_report(job_id, principal, service)
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


async def _source_report(
    job_id: uuid.UUID, principal: Principal, service: ImportService
) -> StreamingResponse:
    """``?format=source``: the rejected rows as they were sent, with ``importer_error`` (a
    JSON Lines file's as JSON Lines; every other as CSV in the file's delimiter)."""
    input_format, lines = await service.source_report(principal, job_id)
    jsonl = input_format is InputFormat.JSONL
    return StreamingResponse(
        text_chunks(lines),
        media_type="application/x-ndjson" if jsonl else "text/csv; charset=utf-8",
        headers={
            "Content-Disposition": (
                f'attachment; filename="import-{job_id}-rejected.{"jsonl" if jsonl else "csv"}"'
            )
        },
    )


@router.get(
    "/v1/imports/{job_id}/duplicates",
    tags=["imports"],
    summary="The duplicate-resolution report (CSV, formula-safe; or JSONL)",
    description=(
        "One row per (key, field) where more than one source competed (rows of the file, or "
        "the file and the stored contact): the winning value, where it came from (`winner_line`: "
        "a line, or `stored`), the losing lines and the rule that decided. Empty when the "
        "import was created with `duplicates_report: false`."
    ),
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
async def import_duplicates(
    job_id: JobId,
    principal: Caller,
    service: Service,
    report_format: Annotated[str, Query(alias="format", pattern="^(csv|jsonl)$")] = "csv",
) -> StreamingResponse:
    rows = await service.duplicates(principal, job_id)
    csv_format = report_format == "csv"
    return StreamingResponse(
        csv_duplicates(rows) if csv_format else jsonl_duplicates(rows),
        media_type="text/csv; charset=utf-8" if csv_format else "application/x-ndjson",
        headers={
            "Content-Disposition": (
                f'attachment; filename="import-{job_id}-duplicates.{report_format}"'
            )
        },
    )
