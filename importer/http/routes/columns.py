"""Routes of the ``columns`` tag: an import's columns with samples and suggested targets, the
mapping a user sets before the start, and the client's memory of past mappings (issue 29)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from importer.core.columns import MemoryEntry
from importer.http import openapi as doc
from importer.http.bodies import json_object, json_response
from importer.http.deps import Caller, JobId, resources_of
from importer.services.columns import ColumnService, columns_document

router = APIRouter()


async def _columns(request: Request) -> ColumnService:
    service = resources_of(request).columns
    assert service is not None
    return service


Columns = Annotated[ColumnService, Depends(_columns)]


def _memory_item(entry: MemoryEntry) -> dict[str, object]:
    return {
        "header_key": entry.header_key,
        "target": entry.target,
        "uses": entry.uses,
        "last_used_at": entry.last_used_at.isoformat(),
    }


@router.get(
    "/v1/imports/{job_id}/columns",
    tags=["columns"],
    summary="The file's columns: samples and a suggested target each (reads the head only)",
    description=(
        "For an import uploaded and not started (or any other whose stored file is there): "
        "each column's position, header, up to 5 sample values (formula-safe), the suggested "
        "target with its reason and confidence, and the target the import will use (`mapped`: "
        "set by PUT). 409 columns_unavailable while the file is not uploaded."
    ),
    responses={200: {"model": doc.ColumnsBody}, **doc.error_responses(404, 409)},
)
async def get_columns(job_id: JobId, principal: Caller, columns: Columns) -> Response:
    return json_response(columns_document(job_id, await columns.inspect(principal, job_id)))


@router.put(
    "/v1/imports/{job_id}/columns",
    tags=["columns"],
    summary="Set the mapping of the file's columns (stored as the import's layout)",
    description=(
        "Each column to import with its target; a column left out is ignored. The start (or "
        "the preview) imports with it, and the client's memory learns it when the import "
        "completes. 400: two columns to one attribute or custom field, an unknown target, no "
        "cpf_cnpj column; 404 custom_field_not_found: not the client's field; 409 "
        "import_already_started."
    ),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": doc.COLUMN_MAPPING_SCHEMA}},
        }
    },
    responses={200: {"model": doc.ColumnsBody}, **doc.error_responses(404, 409)},
)
async def put_columns(
    job_id: JobId, request: Request, principal: Caller, columns: Columns
) -> Response:
    step = await columns.set_mapping(principal, job_id, await json_object(request))
    return json_response(columns_document(job_id, step))


@router.get(
    "/v1/columns/memory",
    tags=["columns"],
    summary="The client's memory: each header mapped by its completed imports, and to what",
    responses={200: {"model": doc.MemoryBody}, **doc.error_responses()},
)
async def get_memory(principal: Caller, columns: Columns) -> Response:
    entries = await columns.memory(principal)
    return json_response({"items": [_memory_item(e) for e in entries]})


@router.delete(
    "/v1/columns/memory",
    tags=["columns"],
    summary="Forget the client's memory of mapped headers",
    responses={200: {"model": doc.ForgottenBody}, **doc.error_responses()},
)
async def delete_memory(principal: Caller, columns: Columns) -> Response:
    return json_response({"forgotten": await columns.forget(principal)})
