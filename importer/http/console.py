"""The web console: one static page, its script, style sheet and icon, served by the API.

The page holds no data (every data call carries the bearer token the user pastes), so it loads
without authentication. Only the known files are served, each with its content type, a strict
Content-Security-Policy (scripts and styles from this origin only, no inline code) and
``nosniff``; anything else under ``/console/`` answers the API's 404. The routes stay out of the
OpenAPI document: they are not part of the API.
"""

from __future__ import annotations

import functools
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

# File name → content type; nothing else is ever read from the package.
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@functools.cache
def _asset(name: str) -> bytes:
    return resources.files("importer.http").joinpath("static", name).read_bytes()


def asset_response(name: str) -> Response:
    """A known asset with its type and the security headers; 404 for any other name."""
    media_type = ASSETS.get(name)
    if media_type is None:
        raise StarletteHTTPException(status_code=404)
    return Response(_asset(name), media_type=media_type, headers=SECURITY_HEADERS)


@router.get("/")
async def console_page() -> Response:
    return asset_response("index.html")


@router.get("/console/{name}")
async def console_asset(name: str) -> Response:
    if name == "index.html":  # the page lives at /
        raise StarletteHTTPException(status_code=404)
    return asset_response(name)
