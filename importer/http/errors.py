"""The API's one error document and the exception handlers that answer with it.

An :class:`ImporterError` answers ``{"error": code, "message": ...}`` with the status and code
its class carries (``http_status``, ``code``: see :mod:`importer.core.errors`), plus
``errors: [{"field", "message"}]`` for an error about one field (``FieldError``); a 5xx answer
carries the class's ``http_message``, never the error's text (driver and storage texts stay in
the logs). Validation problems answer HTTP 400 with a list of ``{"field", "message"}``. No
answer carries a stack trace.
"""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from importer.core.errors import (
    FieldError,
    ImporterError,
    InvalidRequestError,
    RateLimitedError,
    UndoConflictError,
)
from importer.http.bodies import json_response

log = structlog.get_logger(__name__)

UNAVAILABLE = 503  # a service behind us does not answer: a warning, the client retries
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


def error_response(exc: ImporterError) -> Response:
    if isinstance(exc, InvalidRequestError):
        problems = [{"field": name, "message": message} for name, message in exc.problems]
        return json_response(problems, 400)
    status, code = exc.http_status, exc.code
    if isinstance(exc, UndoConflictError):
        conflicts = [{"contact_id": c, "imports": jobs} for c, jobs in exc.conflicts]
        body = {"error": code, "message": str(exc), "conflicts": conflicts}
        return json_response(body, status)
    if isinstance(exc, FieldError) and status < 500:
        problems = [{"field": exc.field, "message": str(exc)}]
        body = {"error": code, "message": str(exc), "errors": problems}
        return json_response(body, status)
    if status < 500:
        return json_response({"error": code, "message": str(exc)}, status, **_headers(exc))
    if status == UNAVAILABLE:
        log.warning("request_failed", error=code, detail=str(exc))
    else:
        log.error("request_failed", error=repr(exc))
    return json_response({"error": code, "message": exc.http_message}, status)


def _headers(exc: ImporterError) -> dict[str, str]:
    if isinstance(exc, RateLimitedError):
        return {"Retry-After": str(exc.retry_after_s)}
    if exc.http_status == 401:
        return {"WWW-Authenticate": "Bearer"}
    return {}


def _field_name(location: tuple[Any, ...]) -> str:
    parts = [str(p) for p in location]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "request"


async def _importer_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ImporterError)
    return error_response(exc)


async def _validation_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    problems = [
        {"field": _field_name(tuple(e.get("loc", ()))), "message": str(e.get("msg", ""))}
        for e in exc.errors()
    ]
    return json_response(problems, 400)


async def _http_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = "no such route" if exc.status_code == 404 else str(exc.detail)
    headers = dict(exc.headers or {})
    return json_response({"error": code, "message": message}, exc.status_code, **headers)


async def _unexpected(_: Request, exc: Exception) -> Response:
    log.error("unhandled_error", exc_info=exc)
    return json_response({"error": "internal_error", "message": "internal error"}, 500)


async def _client_gone(_: Request, __: Exception) -> Response:
    log.info("client_disconnected")
    return json_response({"error": "client_disconnected", "message": "the body ended"}, 400)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ImporterError, _importer_error)
    app.add_exception_handler(ClientDisconnect, _client_gone)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
