"""The console's columns step (issue 29): upload → each column's samples and suggested target,
corrected by the user → preview → apply; the client's memory then suggests the same next time.

Headless Chromium on the real server, as the other console tests; the API's own answers are
the reference.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Page, expect

from tests.api.conftest import Server
from tests.api.support import auth, csv_bytes, token, wait_until
from tests.browser.conftest import ConsolePage
from tests.browser.test_console import JOB_TIMEOUT_MS, UI_TIMEOUT_MS, api_job, sign_in
from tests.support import cpf, fetch

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

HEADER = ["Nome completo", "Coluna 2", "Telefone com DDD", "Obs", "<b>Plano</b>"]
HOSTILE = "<img src=x onerror=alert(1)>"


def contacts_file(path: Path, start: int, count: int) -> Path:
    rows = [
        [f"Pessoa {i}", cpf(start + i), f"(11) 98765-43{i % 10}{i % 10}", f"nota {i}", HOSTILE]
        for i in range(count)
    ]
    path.write_bytes(csv_bytes(HEADER, rows))
    return path


async def upload_for_columns(page: Page, path: Path) -> str:
    """Upload with "Review the columns first" and "Preview first": the columns step's job id."""
    await page.check("#columns-review")
    await page.check("#preview")
    await page.set_input_files("#file", str(path))
    await page.click("#upload-submit")
    await expect(page.locator("#columns")).to_be_visible(timeout=UI_TIMEOUT_MS)
    return (await page.locator("#columns-job").text_content() or "").strip()


async def test_the_columns_step_maps_previews_applies_and_remembers(
    console: ConsolePage, console_server: Server, client_ids: itertools.count[int], tmp_path: Path
) -> None:
    page = console.page
    client_id = next(client_ids)
    bearer = token(client_id, "columns-user")
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    async with httpx.AsyncClient(base_url=console_server.url, timeout=20) as http:
        await sign_in(page, console_server, bearer, client_id)
        job_id = await upload_for_columns(page, contacts_file(tmp_path / "a.csv", 8100, 6))
        assert re.fullmatch(r"[0-9a-f-]{36}", job_id)
        assert (await api_job(http, bearer, job_id))["status"] == "uploaded"

        # What the API suggests, the page shows: samples, selects, reasons, new fields marked.
        shown = (await http.get(f"/v1/imports/{job_id}/columns", headers=auth(bearer))).json()
        rows = page.locator("#columns-body tr")
        await expect(rows).to_have_count(len(HEADER))
        for column in shown["columns"]:
            position = column["position"]
            line = page.locator(f'#columns-body tr[data-position="{position}"]')
            await expect(line.locator("td").nth(1)).to_have_text(column["header"])
            for sample in column["samples"]:
                await expect(line.locator("td.samples")).to_contain_text(sample)
            reason = page.locator(f"#column-reason-{position}")
            await expect(reason).to_have_attribute("data-reason", column["suggestion"]["reason"])
        select = page.locator("#column-target-1")
        await expect(select).to_have_value("cpf_cnpj")
        await expect(page.locator("#column-reason-1")).to_contain_text("values, 100 % of")
        await expect(page.locator("#column-target-2")).to_have_value("phone")
        obs = page.locator('#columns-body tr[data-position="3"]')
        await expect(obs).to_have_class("new-field")
        await expect(page.locator("#column-target-3")).to_have_value("new_custom_field")
        await expect(page.locator('#columns-body tr[data-position="4"] td').nth(1)).to_have_text(
            "<b>Plano</b>"  # a header that is HTML stays text
        )

        # The user corrects: the phone column is WhatsApp, the HTML column is ignored.
        await page.select_option("#column-target-2", "whatsapp")
        await page.select_option("#column-target-4", "ignore")
        await expect(page.locator('#columns-body tr[data-position="4"]')).not_to_have_class(
            "new-field"
        )
        await page.click("#columns-start")
        await expect(page.locator("#columns")).to_be_hidden(timeout=UI_TIMEOUT_MS)
        status = page.locator("#job-status")
        await expect(status).to_have_attribute("data-status", "ready", timeout=JOB_TIMEOUT_MS)
        job = await wait_until(http, bearer, job_id, lambda j: j["status"] == "ready")
        preview = job["preview"]
        assert isinstance(preview, dict)
        assert preview["new_custom_fields"] == ["Obs"]
        await expect(page.locator("#preview-new-fields li")).to_have_text(["Obs"])

        await page.click("#apply")
        await expect(status).to_have_attribute(
            "data-status", re.compile(r"^completed(_with_placeholders)?$"), timeout=JOB_TIMEOUT_MS
        )
        channels = await fetch(
            console_server.dsn,
            "SELECT DISTINCT channel_id FROM contact_details WHERE client_id = $1",
            client_id,
        )
        assert [r["channel_id"] for r in channels] == [2]  # WhatsApp, as chosen
        fields = await fetch(
            console_server.dsn, "SELECT name FROM custom_field WHERE client_id = $1", client_id
        )
        assert [r["name"] for r in fields] == ["Obs"]

        # The next upload: the memory suggests what the user chose.
        await page.uncheck("#preview")
        second = await upload_for_columns(page, contacts_file(tmp_path / "b.csv", 8200, 3))
        assert second != job_id
        await expect(page.locator("#column-target-2")).to_have_value("whatsapp")
        await expect(page.locator("#column-reason-2")).to_have_attribute("data-reason", "memory")
        await expect(page.locator("#column-target-4")).to_have_value("ignore")
        await expect(page.locator("#column-target-3")).to_have_value(
            re.compile(r"^custom_field:\d+$")
        )
        # Back later: the history opens an uploaded import at its columns step.
        await page.reload()
        await expect(page.locator("#columns")).to_be_hidden()
        await page.locator(f'#history-body tr[data-job-id="{second}"] button').click()
        await expect(page.locator("#columns")).to_be_visible(timeout=UI_TIMEOUT_MS)
        await expect(page.locator("#columns-job")).to_have_text(second)
        await expect(page.locator("#column-target-2")).to_have_value("whatsapp")
        await page.click("#columns-forget")
        await expect(page.locator("#message")).to_contain_text("Forgot 5 remembered")
        memory = (await http.get("/v1/columns/memory", headers=auth(bearer))).json()
        assert memory["items"] == []
    assert dialogs == []
    assert await page.evaluate("window.__pwned === undefined")
    assert console.errors == []
