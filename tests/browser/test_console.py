"""The web console end to end: token, upload, live progress, counters, report, history, cancel.

Headless Chromium drives the page served by the real server (``importer serve`` as a
subprocess, a fresh database, local storage); the API's own JSON is the reference the page's
text is checked against. Every wait is bounded.
"""

from __future__ import annotations

import itertools
import re
import uuid
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Page, expect

from tests.api.conftest import Server
from tests.api.support import auth, csv_bytes, token, upload
from tests.browser.conftest import ConsolePage
from tests.jobs_support import eventually
from tests.support import bad_cpf, cpf, fetch

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "contacts.csv"
COUNTERS = ("rows_read", "inserted", "updated", "invalid", "error", "ignored")
JOB_TIMEOUT_MS = 60_000
UI_TIMEOUT_MS = 15_000
HISTORY_PAGE = 10  # console.js's page size
LARGE_ROWS = 6000


async def sign_in(page: Page, server: Server, bearer: str, client_id: int) -> None:
    await page.goto(f"{server.url}/", timeout=UI_TIMEOUT_MS)
    await page.fill("#token", bearer)
    await page.click("#token-save")
    await expect(page.locator("#token-state")).to_contain_text(
        f"client {client_id}", timeout=UI_TIMEOUT_MS
    )
    assert await page.evaluate("sessionStorage.getItem('importer.token')") == bearer


async def submit(page: Page, path: Path, strategy: str, previous: str = "") -> str:
    """Upload through the form; the id of the (new) job the page then watches."""
    await page.set_input_files("#file", str(path))
    await page.select_option("#conflict_strategy", strategy)
    await page.click("#upload-submit")
    job_id = page.locator("#job-id")
    if previous:
        await expect(job_id).not_to_have_text(previous, timeout=UI_TIMEOUT_MS)
    await expect(job_id).to_have_text(re.compile(r"^[0-9a-f-]{36}$"), timeout=UI_TIMEOUT_MS)
    return (await job_id.text_content() or "").strip()


async def api_job(http: httpx.AsyncClient, bearer: str, job_id: str) -> dict[str, object]:
    response = await http.get(f"/v1/imports/{job_id}", headers=auth(bearer))
    assert response.status_code == 200, response.text
    job: dict[str, object] = response.json()
    return job


async def assert_counters_shown(page: Page, job: dict[str, object]) -> None:
    counters = job["counters"]
    assert isinstance(counters, dict)
    for name in COUNTERS:
        await expect(page.locator(f"#counter-{name}")).to_have_text(
            str(counters[name]), timeout=UI_TIMEOUT_MS
        )


def large_csv(path: Path) -> Path:
    rows = [[f"Pessoa {i}", cpf(700_000 + i), f"p{i}@example.com"] for i in range(LARGE_ROWS)]
    path.write_bytes(csv_bytes(["nome", "cpf", "email"], rows))
    return path


async def test_the_console_imports_watches_reports_and_cancels(
    console: ConsolePage,
    console_server: Server,
    client_ids: itertools.count[int],
    tmp_path: Path,
) -> None:
    page = console.page
    client_id = next(client_ids)
    bearer = token(client_id, "console-user")
    async with httpx.AsyncClient(base_url=console_server.url, timeout=20) as http:
        await sign_in(page, console_server, bearer, client_id)

        # The sample, MERGE: the live stream brings the page to the end.
        job_id = await submit(page, SAMPLE, "merge")
        status = page.locator("#job-status")
        await expect(status).to_have_attribute(
            "data-status", re.compile(r"^completed(_with_placeholders)?$"), timeout=JOB_TIMEOUT_MS
        )
        job = await api_job(http, bearer, job_id)
        assert job["status"] in {"completed", "completed_with_placeholders"}
        assert job["conflict_strategy"] == "merge"
        await expect(status).to_have_text(str(job["status"]))
        await assert_counters_shown(page, job)
        counters = job["counters"]
        assert isinstance(counters, dict)
        assert counters["rows_read"] == 1000
        assert counters["invalid"] > 0  # the sample has invalid rows: the report has some
        await expect(page.locator("#job-eta")).to_have_text("—")
        row = page.locator(f'#history-body tr[data-job-id="{job_id}"]')
        await expect(row).to_contain_text(str(job["status"]), timeout=UI_TIMEOUT_MS)

        # The error report, viewed: the same rows the API's JSONL gives.
        await page.click("#report-view")
        report = await http.get(f"/v1/imports/{job_id}/errors?format=jsonl", headers=auth(bearer))
        issues = report.text.splitlines()
        assert issues
        rows = page.locator("#report-body tr")
        await expect(rows).to_have_count(min(len(issues), 500), timeout=UI_TIMEOUT_MS)
        first = rows.first.locator("td")
        await expect(first.nth(0)).to_have_text(re.compile(r"^\d+$"))
        await expect(first.nth(2)).not_to_be_empty()

        # …and downloaded: the API's CSV, byte for byte.
        async with page.expect_download(timeout=UI_TIMEOUT_MS) as download_info:
            await page.click("#report-download")
        download = await download_info.value
        saved = tmp_path / "report.csv"
        await download.save_as(saved)
        assert download.suggested_filename == f"import-{job_id}-errors.csv"
        expected = await http.get(f"/v1/imports/{job_id}/errors", headers=auth(bearer))
        assert saved.read_bytes() == expected.content
        assert saved.read_text().startswith("line,column,reason,severity,value\n")

        # A long import, cancelled from the page while it runs: counters stay truthful.
        big_id = await submit(page, large_csv(tmp_path / "large.csv"), "merge", previous=job_id)
        await expect(status).to_have_attribute("data-status", "importing", timeout=JOB_TIMEOUT_MS)
        await expect(page.locator("#counter-rows_read")).not_to_have_text(
            "0", timeout=UI_TIMEOUT_MS
        )
        await expect(page.locator("#job-cancel")).to_be_enabled()
        await page.click("#job-cancel")
        await expect(status).to_have_attribute("data-status", "cancelled", timeout=JOB_TIMEOUT_MS)
        big = await api_job(http, bearer, big_id)
        assert big["status"] == "cancelled"
        assert big["cancel_requested"] is True
        big_counters = big["counters"]
        assert isinstance(big_counters, dict)
        assert 0 < big_counters["rows_read"] < LARGE_ROWS
        await assert_counters_shown(page, big)
        await expect(page.locator("#job-cancel")).to_be_disabled()

        # History, newest first, with "load more" through the cursor.
        for n in range(HISTORY_PAGE):
            tiny = csv_bytes(["nome", "cpf"], [[f"Tiny {n}", bad_cpf(n)]])
            created = await upload(http, bearer, tiny, f"tiny-{n}.csv")
            assert created.status_code == 202, created.text
        await page.click("#history-refresh")
        history = page.locator("#history-body tr")
        await expect(history).to_have_count(HISTORY_PAGE, timeout=UI_TIMEOUT_MS)
        await expect(history.first).to_contain_text(f"tiny-{HISTORY_PAGE - 1}.csv")
        more = page.locator("#history-more")
        await expect(more).to_be_visible()
        await more.click()
        await expect(history).to_have_count(HISTORY_PAGE + 2, timeout=UI_TIMEOUT_MS)
        await expect(history.last).to_contain_text("contacts.csv")
        await expect(history.nth(HISTORY_PAGE)).to_contain_text("large.csv")
        await expect(more).to_be_hidden()

        # No script error, no CSP violation, no failed request along the way.
        await expect(page.locator("#message")).not_to_have_attribute("data-kind", "error")
        assert console.errors == []


ETA_TEXT = re.compile(r"^(\d+h \d{2}m \d{2}s|\d+m \d{2}s|\d+s)$")  # formatEta's shapes
RATE_TEXT = re.compile(r"^[1-9][\d,]* rows/s$")


async def test_the_console_shows_the_queue_position_then_the_phase_rate_and_eta(
    console: ConsolePage,
    console_server: Server,
    client_ids: itertools.count[int],
    tmp_path: Path,
) -> None:
    """Two long imports of the tenant hold both of its slots (2 workers, 2 per client): the
    page's upload waits queued, first in line; once they are cancelled it runs, and the page
    shows its phase, its rows/s and its ETA as the API gives them; at the end, dashes."""
    page = console.page
    client_id = next(client_ids)
    bearer = token(client_id, "console-user")
    content = large_csv(tmp_path / "large.csv").read_bytes()
    async with httpx.AsyncClient(base_url=console_server.url, timeout=20) as http:
        blockers = []
        for n in range(2):
            created = await upload(http, bearer, content, f"blocker-{n}.csv")
            assert created.status_code == 202, created.text
            blockers.append(str(created.json()["id"]))

        async def both_claimed() -> bool | None:
            rows = await fetch(
                console_server.dsn,
                "SELECT count(*) AS n FROM import_job WHERE id = ANY($1::uuid[])"
                " AND lease_expires_at > now()",
                [uuid.UUID(b) for b in blockers],
            )
            return rows[0]["n"] == 2 or None

        await eventually(both_claimed)
        await sign_in(page, console_server, bearer, client_id)
        job_id = await submit(page, tmp_path / "large.csv", "merge")
        status = page.locator("#job-status")
        await expect(status).to_have_attribute("data-status", "queued", timeout=UI_TIMEOUT_MS)
        waiting = await api_job(http, bearer, job_id)
        assert (waiting["status"], waiting["queue_position"]) == ("queued", 1)
        await expect(page.locator("#job-queue")).to_have_text(
            "(queue position 1)", timeout=UI_TIMEOUT_MS
        )
        await expect(page.locator("#job-phase")).to_have_text("—")
        await expect(page.locator("#job-rate")).to_have_text("—")

        for blocker in blockers:
            cancelled = await http.post(f"/v1/imports/{blocker}/cancel", headers=auth(bearer))
            assert cancelled.status_code == 202, cancelled.text
        await expect(status).to_have_attribute("data-status", "importing", timeout=JOB_TIMEOUT_MS)
        await expect(page.locator("#job-queue")).to_have_text("")
        await expect(page.locator("#job-phase")).to_have_text("applying", timeout=UI_TIMEOUT_MS)
        await expect(page.locator("#job-rate")).to_have_text(RATE_TEXT, timeout=UI_TIMEOUT_MS)
        await expect(page.locator("#job-eta")).to_have_text(ETA_TEXT, timeout=UI_TIMEOUT_MS)
        running = await api_job(http, bearer, job_id)
        assert running["phase"] in ("applying", "finalizing")
        shown_progress = running["progress"]
        assert isinstance(shown_progress, dict)
        assert shown_progress["rows_per_s"] > 0

        await page.click("#job-cancel")
        await expect(status).to_have_attribute("data-status", "cancelled", timeout=JOB_TIMEOUT_MS)
        ended = await api_job(http, bearer, job_id)
        assert (ended["phase"], ended["eta_s"], ended["queue_position"]) == (None, None, None)
        for selector in ("#job-phase", "#job-rate", "#job-eta"):
            await expect(page.locator(selector)).to_have_text("—")
        await expect(page.locator("#job-queue")).to_have_text("")
    assert console.errors == []


async def test_the_page_refuses_inline_script(console: ConsolePage, console_server: Server) -> None:
    """The policy holds in the browser: script injected into the page's DOM does not run."""
    page = console.page
    await page.goto(f"{console_server.url}/", timeout=UI_TIMEOUT_MS)
    await page.evaluate(
        """() => {
            const s = document.createElement('script');
            s.textContent = 'window.__injected = true';
            document.body.append(s);
        }"""
    )
    assert await page.evaluate("window.__injected === undefined")
    assert any("Content Security Policy" in error for error in console.errors), console.errors
