"""Routes of the ``hsm`` tag: an import that holds a message firing until it completes."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from importer.core.errors import UnsupportedMediaTypeError
from importer.http import openapi as doc
from importer.http.bodies import job_response
from importer.http.deps import Creator, Service
from importer.http.forms import boundary_of
from importer.http.routes.imports import multipart_import

router = APIRouter()


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
    view = await multipart_import(request, principal, hsm=True)
    return job_response(service, view, 202)
