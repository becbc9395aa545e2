"""Routes of the ``uploads`` tag: announce a file (a job ``uploading`` and the URL to PUT it to)
and this server's own upload URL. The check of the uploaded file, ``POST
/v1/imports/{job_id}/uploaded``, is added with the imports routes (:mod:`.imports`).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from importer.core.errors import UnsupportedMediaTypeError
from importer.http import openapi as doc
from importer.http.bodies import is_json, json_object, json_response, refuse_large
from importer.http.deps import Caller, Creator, JobId, Service, resources_of
from importer.http.streams import Body, answer_when_too_large
from importer.services.documents import job_document

router = APIRouter()


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
    if not is_json(request):
        raise UnsupportedMediaTypeError("send application/json")
    view, target = await service.create_upload(principal, await json_object(request))
    resources_of(request).metrics.imports_created.labels("upload_url").inc()
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
    refuse_large(request, await service.upload_limit(principal, job_id))
    body = Body(request, resources_of(request).metrics)
    async with answer_when_too_large(body):
        stored = await service.receive_put(principal, job_id, body.blocks())
    return json_response({"key": stored.key, "size": stored.size, "sha256": stored.sha256})
