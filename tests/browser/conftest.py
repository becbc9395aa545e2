"""The browser tier: the web console in headless Chromium against the real server.

Debian's ``/usr/bin/chromium`` (``scripts/install`` installs it as root), driven by Playwright's
async API (never ``playwright install``: the machine has no network). One browser per session,
one context per test; a failed test leaves a screenshot of its page under its tmp dir and says
where.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.async_api import Browser, ConsoleMessage, Page, Response, async_playwright

from tests.api.conftest import Server, start_server, stop_server
from tests.conftest import _admin, dsn_for

CHROMIUM = Path("/usr/bin/chromium")
HAVE_CHROMIUM = CHROMIUM.exists()
# The machine's network is closed: nothing may phone home or wait on it.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LAUNCH_TIMEOUT_MS = 30_000
ACTION_TIMEOUT_MS = 20_000
SCREENSHOT_TIMEOUT_MS = 10_000
# Each batch sleeps after its commit, so an import of a few thousand rows runs long enough for
# a cancel to land mid-file; the sample's takes about a second.
BATCH_SLEEP_MS = 40
CHUNK_SIZE = 50


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    """Keep each phase's report on the item (``item.rep_call``) for the fixtures' teardown."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(scope="session")
async def console_db(template_db: str) -> AsyncIterator[str]:
    name = f"importer_browser_{uuid.uuid4().hex[:10]}"
    await _admin(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    yield dsn_for(name)
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def console_server(console_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`importer serve` on its own database and a local storage directory."""
    base = tmp_path_factory.mktemp("browser")
    running = start_server(
        console_db,
        base / "serve.log",
        IMPORTER_STORAGE_DIR=str(base / "objects"),
        IMPORTER_MAX_UPLOAD_BYTES=str(32 * 1024 * 1024),
        IMPORTER_CHUNK_SIZE=str(CHUNK_SIZE),
        IMPORTER_FAILPOINTS=f"after_commit=sleep:{BATCH_SLEEP_MS}",
    )
    try:
        yield running
    finally:
        stop_server(running)


@pytest.fixture(scope="session")
async def chromium() -> AsyncIterator[Browser]:
    if not HAVE_CHROMIUM:
        pytest.skip(f"{CHROMIUM} is missing: run ./scripts/install as root (Debian's chromium)")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=LAUNCH_TIMEOUT_MS
        )
        try:
            yield browser
        finally:
            await browser.close()


@dataclass
class ConsolePage:
    """The page and what its console said: errors include CSP violations and script faults."""

    page: Page
    errors: list[str] = field(default_factory=list)

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(message.text)

    def on_response(self, response: Response) -> None:
        if response.status >= 400:
            self.errors.append(f"HTTP {response.status}: {response.request.method} {response.url}")


@pytest.fixture
async def console(
    chromium: Browser, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ConsolePage]:
    context = await chromium.new_context(accept_downloads=True)
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    page = await context.new_page()
    watched = ConsolePage(page)
    page.on("console", watched.on_console)
    page.on("pageerror", lambda error: watched.errors.append(f"page error: {error}"))
    page.on("response", watched.on_response)
    try:
        yield watched
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is None or report.failed:
            shot = tmp_path / "console-failure.png"
            try:
                await page.screenshot(path=shot, full_page=True, timeout=SCREENSHOT_TIMEOUT_MS)
            except Exception as exc:  # the page may be gone; the failure itself matters more
                print(f"no screenshot of the console: {exc!r}")
            else:
                message = f"screenshot of the console at failure: {shot}"
                print(message)
                request.node.user_properties.append(("screenshot", str(shot)))
                terminal = request.config.pluginmanager.get_plugin("terminalreporter")
                if terminal is not None:
                    terminal.write_line(f"\n{message}")
        await context.close()
