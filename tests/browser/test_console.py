"""The web console end to end: token, upload, live progress, counters, report, history, cancel,
preview and apply.

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
from tests.api.support import auth, csv_bytes, token, upload, wait_terminal, wait_until
from tests.browser.conftest import ConsolePage
from tests.jobs_support import eventually
from tests.support import CONTACT_TABLES, bad_cpf, cpf, fetch

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


# --- preview, then apply ---------------------------------------------------------------------

HOSTILE = "<img src=x onerror=alert(1)>"
HOSTILE_HEADER = "<b onmouseover=alert(2)>plano</b>"
HOSTILE_VALUE = "<script>window.__pwned = true</script>"
PREVIEW_RUNNING = ("queued", "normalizing")  # a preview's statuses before it rests
SEEDED = 3  # rows of the sample the tenant imports before its preview, under other names


async def submit_preview(page: Page, path: Path, max_invalid: str = "") -> str:
    """Upload through the form with "Preview first" ticked; the id of the job shown."""
    await page.check("#preview")
    await expect(page.locator("#upload-submit")).to_have_text("Upload and preview")
    await page.fill("#max-invalid", max_invalid)
    return await submit(page, path, "merge")


async def tenant_rows(dsn: str, client_id: int) -> dict[str, int]:
    """How many rows each contact table holds for the tenant."""
    counts = {}
    for table in CONTACT_TABLES:
        rows = await fetch(
            dsn, f"SELECT count(*) AS n FROM {table} WHERE client_id = $1", client_id
        )
        counts[table] = rows[0]["n"]
    return counts


def shown(value: object) -> str:
    """A value before or after as the page writes it (console.js's shownValue)."""
    if value is None or value == []:
        return "—"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def sample_rows(preview: dict[str, object]) -> list[list[str]]:
    """The sample table's cells the API's document calls for: one row per changed field, the
    contact's line, key and action on its first row only (they span the others)."""
    sample = preview["sample"]
    assert isinstance(sample, list)
    rows: list[list[str]] = []
    for contact in sample:
        for index, (name, change) in enumerate(contact["fields"].items()):
            head = [str(contact["line"]), contact["key"], contact["action"]] if index == 0 else []
            rows.append([*head, name, shown(change["before"]), shown(change["after"])])
    return rows


async def ready_preview(http: httpx.AsyncClient, bearer: str, job_id: str) -> dict[str, object]:
    job = await wait_until(http, bearer, job_id, lambda j: j["status"] not in PREVIEW_RUNNING)
    assert (job["status"], job["awaiting_apply"]) == ("ready", True), job
    preview = job["preview"]
    assert isinstance(preview, dict)
    return preview


async def assert_preview_shown(page: Page, preview: dict[str, object]) -> None:
    """The panel says what the API's preview document says, figure for figure."""
    panel = page.locator("#preview-panel")
    await expect(panel).to_be_visible(timeout=JOB_TIMEOUT_MS)
    counters = preview["counters"]
    assert isinstance(counters, dict)
    for name in COUNTERS:
        await expect(page.locator(f"#preview-{name}")).to_have_text(
            str(counters[name]), timeout=UI_TIMEOUT_MS
        )
    fields = preview["fields"]
    assert isinstance(fields, dict)
    rows = page.locator("#preview-fields-body tr")
    await expect(rows).to_have_count(len(fields))
    for index, (name, tally) in enumerate(fields.items()):
        expected = [name, str(tally["first"]), str(tally["changed"]), str(tally["kept"])]
        await expect(rows.nth(index).locator("td")).to_have_text(expected)
    new_fields = preview["new_custom_fields"]
    assert isinstance(new_fields, list)
    await expect(page.locator("#preview-new-fields li")).to_have_text(new_fields)
    await expect(page.locator("#preview-new-fields-none")).to_be_visible(visible=not new_fields)
    cells = await page.eval_on_selector_all(
        "#preview-sample-body tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    assert cells == sample_rows(preview)


async def test_the_console_previews_writes_nothing_then_applies(
    console: ConsolePage,
    console_server: Server,
    client_ids: itertools.count[int],
    tmp_path: Path,
) -> None:
    """The sample previewed from the form (with an error threshold) over a tenant that holds
    three of its contacts: the panel shows the API's preview document, nothing is written;
    Apply imports it, and it ends with the preview's counters, which the page says."""
    page = console.page
    client_id = next(client_ids)
    bearer = token(client_id, "console-user")
    dsn = console_server.dsn
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    header, seeded = lines[0], lines[1 : 1 + SEEDED]
    renamed = [f"Antes {n}," + line.split(",", 1)[1] for n, line in enumerate(seeded)]
    async with httpx.AsyncClient(base_url=console_server.url, timeout=20) as http:
        seed = await upload(http, bearer, "\n".join([header, *renamed, ""]).encode(), "seed.csv")
        assert seed.status_code == 202, seed.text
        assert (await wait_terminal(http, bearer, str(seed.json()["id"])))["status"] in {
            "completed",
            "completed_with_placeholders",
        }
        before = await tenant_rows(dsn, client_id)
        assert 0 < before["contact"] <= SEEDED  # the sample's rows may be invalid too

        await sign_in(page, console_server, bearer, client_id)
        job_id = await submit_preview(page, SAMPLE, max_invalid="5%")
        status = page.locator("#job-status")
        await expect(status).to_have_attribute("data-status", "ready", timeout=JOB_TIMEOUT_MS)
        preview = await ready_preview(http, bearer, job_id)
        job = await api_job(http, bearer, job_id)
        assert job["max_invalid"] == "5%"
        await assert_preview_shown(page, preview)
        counters = preview["counters"]
        assert isinstance(counters, dict)
        assert counters["rows_read"] == 1000
        assert counters["updated"] >= before["contact"]
        assert counters["invalid"] > 0
        await expect(page.locator("#job-validation")).to_contain_text("threshold 5% — within")
        await expect(page.locator("#preview-expires")).to_contain_text("Expires ")
        await expect(page.locator("#preview-differs")).to_be_hidden()
        # Nothing imported: the job's own counters stay zero, the tenant's rows are as they were.
        await assert_counters_shown(page, job)
        assert await tenant_rows(dsn, client_id) == before

        apply = page.locator("#apply")
        await expect(apply).to_be_enabled()
        await apply.click()
        await expect(status).to_have_attribute(
            "data-status", re.compile(r"^completed(_with_placeholders)?$"), timeout=JOB_TIMEOUT_MS
        )
        done = await api_job(http, bearer, job_id)
        assert done["counters"] == counters
        assert done["counters_differ_from_preview"] is False
        await assert_counters_shown(page, done)
        differs = page.locator("#preview-differs")
        await expect(differs).to_have_attribute("data-differs", "false", timeout=UI_TIMEOUT_MS)
        await expect(differs).to_have_text("The import's counters equal the preview's.")
        await expect(page.locator("#preview-state")).to_have_text("— applied")
        await expect(apply).to_be_hidden()
        await expect(page.locator("#preview-expires")).to_be_hidden()
        after = await tenant_rows(dsn, client_id)
        assert after["contact"] == before["contact"] + counters["inserted"]
        await expect(page.locator("#message")).not_to_have_attribute("data-kind", "error")
    assert console.errors == []


async def test_the_console_shows_hostile_values_of_a_preview_as_text(
    console: ConsolePage,
    console_server: Server,
    client_ids: itertools.count[int],
    tmp_path: Path,
) -> None:
    """A name that is HTML, a custom column whose header is HTML and whose value is a script:
    the panel shows each as the text it is; no element is made of them, nothing runs."""
    page = console.page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    client_id = next(client_ids)
    bearer = token(client_id, "console-user")
    path = tmp_path / "hostile.csv"
    path.write_bytes(
        csv_bytes(["nome", "cpf", HOSTILE_HEADER], [[HOSTILE, cpf(812_345_678), HOSTILE_VALUE]])
    )
    async with httpx.AsyncClient(base_url=console_server.url, timeout=20) as http:
        await sign_in(page, console_server, bearer, client_id)
        job_id = await submit_preview(page, path)
        preview = await ready_preview(http, bearer, job_id)
        await assert_preview_shown(page, preview)
        sample = preview["sample"]
        assert isinstance(sample, list)
        (contact,) = sample
        assert contact["fields"]["name"] == {"before": None, "after": HOSTILE}
        custom = [name for name in contact["fields"] if name.startswith("custom:")]
        assert len(custom) == 1
        assert "<b" in custom[0]
        assert contact["fields"][custom[0]]["after"] == HOSTILE_VALUE
        panel = page.locator("#preview-panel")
        await expect(panel.locator("#preview-sample-body")).to_contain_text(HOSTILE)
        await expect(panel.locator("#preview-sample-body")).to_contain_text(HOSTILE_VALUE)
        await expect(panel.locator("#preview-new-fields li")).to_contain_text(["plano</b>"])
        for tag in ("img", "b", "script"):
            assert await panel.locator(tag).count() == 0, tag
        assert await page.evaluate("window.__pwned === undefined")
        cancelled = await http.post(f"/v1/imports/{job_id}/cancel", headers=auth(bearer))
        assert cancelled.status_code == 202, cancelled.text
        await expect(page.locator("#job-status")).to_have_attribute(
            "data-status", "cancelled", timeout=JOB_TIMEOUT_MS
        )
        await expect(page.locator("#apply")).to_be_hidden()
        await expect(page.locator("#preview-state")).to_have_text("— not applied")
        assert await tenant_rows(console_server.dsn, client_id) == dict.fromkeys(CONTACT_TABLES, 0)
    assert dialogs == []
    assert console.errors == []
