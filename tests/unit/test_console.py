"""The web console's routes: the page and its two assets, strict headers, nothing else served."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest

from importer.http.app import create_app
from importer.http.console import ASSETS
from importer.settings import Settings


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    # ASGITransport runs no lifespan: no database, no workers; the console needs neither.
    transport = httpx.ASGITransport(app=create_app(Settings()))
    async with httpx.AsyncClient(transport=transport, base_url="http://console.test") as http:
        yield http


def assert_strict_headers(headers: httpx.Headers) -> None:
    policy = headers.get("content-security-policy", "")
    directives = {}
    for part in policy.split(";"):
        name, _, value = part.strip().partition(" ")
        directives[name] = value
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self'"
    assert "unsafe-inline" not in policy
    assert "unsafe-eval" not in policy
    assert headers.get("x-content-type-options") == "nosniff"


async def test_the_page_is_html_with_a_strict_policy(client: httpx.AsyncClient) -> None:
    response = await client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert_strict_headers(response.headers)
    html = response.text
    assert '<script src="/console/console.js" defer></script>' in html
    # No inline script or handler: the policy would block it anyway.
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html)
    assert not re.search(r"\son[a-z]+\s*=", html)
    assert "importer token --client-id" in html


@pytest.mark.parametrize(
    ("name", "media_type"),
    [
        ("console.js", "text/javascript; charset=utf-8"),
        ("console.css", "text/css; charset=utf-8"),
        ("favicon.svg", "image/svg+xml"),
    ],
)
async def test_the_assets_have_their_content_types(
    client: httpx.AsyncClient, name: str, media_type: str
) -> None:
    response = await client.get(f"/console/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"] == media_type
    assert_strict_headers(response.headers)
    assert response.content


def test_the_script_never_writes_html() -> None:
    from importlib import resources

    script = resources.files("importer.http").joinpath("static", "console.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script


@pytest.mark.parametrize(
    "path",
    [
        "/console/../api.py",
        "/console/..%2Fapi.py",
        "/console/%2E%2E/console.py",
        "/console/%2e%2e%2fsettings.py",
        "/console/..%5Capi.py",
        "/console/console.py",
        "/console/index.html",
        "/console/",
        "/console/CONSOLE.JS",
        "/console/console.js%00.py",
    ],
)
async def test_other_paths_are_refused(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 404, path
    assert response.json()["error"] == "not_found"


def test_the_console_stays_out_of_the_schema() -> None:
    paths = create_app(Settings()).openapi()["paths"]
    assert "/" not in paths
    assert not any(path.startswith("/console") for path in paths)


def test_every_asset_is_packaged() -> None:
    from importlib import resources

    for name in ASSETS:
        assert resources.files("importer.http").joinpath("static", name).is_file()


def _static(name: str) -> str:
    from importlib import resources

    return resources.files("importer.http").joinpath("static", name).read_text()


COUNTERS = ("rows_read", "inserted", "updated", "invalid", "error", "ignored")


def test_every_element_the_script_looks_up_is_on_the_page() -> None:
    page_ids = set(re.findall(r'\bid="([^"]+)"', _static("index.html")))
    script = _static("console.js")
    wanted = set(re.findall(r'\$\("([^"]+)"\)', script))
    for prefix in re.findall(r"\$\(`([a-z-]+)-\$\{name\}`\)", script):
        wanted.update(f"{prefix}-{counter}" for counter in COUNTERS)
    assert {"preview", "max-invalid", "preview-panel", "apply"} <= wanted
    assert {f"preview-{counter}" for counter in COUNTERS} <= wanted
    assert wanted - page_ids == set()


def test_the_form_fields_the_script_sends_are_create_options() -> None:
    from importer.core.options import OPTION_FIELDS
    from importer.services.imports import START_FIELD

    sent = set(re.findall(r'form\.append\("([a-z_]+)"', _static("console.js")))
    assert {"preview", "max_invalid", START_FIELD} <= sent
    assert sent - {"file", START_FIELD} <= set(OPTION_FIELDS)


def test_the_page_has_no_inline_code_the_policy_would_block() -> None:
    page = _static("index.html")
    assert not re.search(r"\sstyle=", page)
    assert not re.search(r"\son[a-z]+=", page)
    assert "<style" not in page
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/console/console.js" defer>']
