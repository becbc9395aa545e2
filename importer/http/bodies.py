"""Request and response bodies: JSON objects in (bounded, refused unread when too large), JSON
documents out."""

from __future__ import annotations

import uuid

import orjson
from fastapi import Request
from fastapi.responses import Response

from importer.core.errors import InvalidRequestError, RequestTooLargeError
from importer.core.models import JobView
from importer.core.options import NUL_MESSAGE
from importer.services.documents import job_document
from importer.services.imports import ImportService

# A JSON request body (options, a layout) is small; larger ones are refused unread.
MAX_JSON_BYTES = 1024 * 1024
# An Idempotency-Key is an opaque client token; the cap bounds what we store.
MAX_OPERATION_ID_CHARS = 200


# --- responses --------------------------------------------------------------------------------


def json_response(document: object, status: int = 200, **headers: str) -> Response:
    return Response(
        orjson.dumps(document), status_code=status, media_type="application/json", headers=headers
    )


def job_response(service: ImportService, view: JobView, status: int = 200) -> Response:
    return json_response(job_document(view, service.clock()), status)


# --- request bodies ---------------------------------------------------------------------------


def refuse_large(request: Request, limit: int) -> None:
    """413 from the Content-Length alone, before a byte of the body is read."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestTooLargeError(f"the request body is larger than {limit} bytes")


async def json_object(request: Request, *, optional: bool = False) -> dict[str, object]:
    refuse_large(request, MAX_JSON_BYTES)
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


def is_json(request: Request) -> bool:
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return kind == "application/json"


def operation_id(request: Request, body: dict[str, object]) -> str:
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
