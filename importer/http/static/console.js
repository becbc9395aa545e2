// The importer's web console: plain JavaScript, no build step, no dependencies.
//
// Every data call carries the bearer token kept in sessionStorage. Live progress comes from the
// SSE endpoint read with fetch() (EventSource cannot send an Authorization header). Every value
// from the API reaches the page through textContent or an attribute, never as HTML.
"use strict";

(() => {
  const TOKEN_KEY = "importer.token";
  const COUNTERS = ["rows_read", "inserted", "updated", "invalid", "error", "ignored"];
  const TERMINAL = new Set(["completed", "completed_with_placeholders", "failed", "cancelled", "undone"]);
  const HISTORY_PAGE = 10;
  const REPORT_ROWS_SHOWN = 500;
  const RECONNECT_DELAY_MS = 1000;
  const MAX_RECONNECTS = 30;

  const $ = (id) => document.getElementById(id);
  let watching = null; // {id, controller}
  let historyCursor = null;
  let previewShown = null; // the id of the job whose preview document the panel holds

  // --- messages and the token ---------------------------------------------------------------

  function say(text, kind = "error") {
    const box = $("message");
    box.textContent = text;
    box.dataset.kind = kind;
    box.hidden = !text;
  }

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  function claims(bearer) {
    // For display only: the server verifies the token, the page never trusts these.
    try {
      const part = bearer.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      const padded = part + "=".repeat((4 - (part.length % 4)) % 4);
      const value = JSON.parse(atob(padded));
      return value && typeof value === "object" ? value : null;
    } catch {
      return null;
    }
  }

  function showTokenState() {
    const bearer = token();
    const state = $("token-state");
    if (!bearer) {
      state.textContent =
        "No token: paste one (it is kept in this tab's session storage only).";
      $("token").placeholder = "";
      return;
    }
    $("token").placeholder = "(a token is set)";
    const found = claims(bearer);
    if (!found) {
      state.textContent = "A token is set.";
      return;
    }
    const expires =
      typeof found.exp === "number" ? new Date(found.exp * 1000).toLocaleString() : "never";
    state.textContent =
      `Token set: client ${String(found.client_id)}, user ${String(found.sub)}, ` +
      `expires ${expires}.`;
  }

  // --- HTTP -----------------------------------------------------------------------------------

  async function describeError(response) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      return `HTTP ${response.status}`;
    }
    if (Array.isArray(body)) {
      return body.map((p) => `${String(p.field)}: ${String(p.message)}`).join("; ");
    }
    if (body && typeof body === "object" && "message" in body) {
      return `${String(body.error)}: ${String(body.message)}`;
    }
    return `HTTP ${response.status}`;
  }

  async function api(path, options = {}) {
    const bearer = token();
    if (!bearer) {
      throw new Error("paste a bearer token first");
    }
    const headers = Object.assign({}, options.headers || {}, {
      Authorization: `Bearer ${bearer}`,
    });
    const response = await fetch(
      path,
      Object.assign({}, options, { headers, cache: "no-store", credentials: "omit" }),
    );
    if (!response.ok) {
      throw new Error(await describeError(response));
    }
    return response;
  }

  const jobPath = (id, rest = "") => `/v1/imports/${encodeURIComponent(id)}${rest}`;

  // --- the job panel --------------------------------------------------------------------------

  function formatEta(seconds) {
    if (typeof seconds !== "number" || !Number.isFinite(seconds)) {
      return "—";
    }
    const total = Math.max(0, Math.round(seconds));
    const h = Math.floor(total / 3600);
    const m = Math.floor((total % 3600) / 60);
    const s = total % 60;
    const two = (n) => String(n).padStart(2, "0");
    return h > 0 ? `${h}h ${two(m)}m ${two(s)}s` : m > 0 ? `${m}m ${two(s)}s` : `${s}s`;
  }

  function formatRate(perSecond) {
    return Math.max(0, Math.round(perSecond)).toLocaleString("en-US");
  }

  function showJob(job) {
    if (!watching || job.id !== watching.id) {
      return;
    }
    $("job").hidden = false;
    $("job-id").textContent = String(job.id);
    $("job-filename").textContent = job.filename ? String(job.filename) : "(no name)";
    const status = String(job.status);
    $("job-status").textContent = status;
    $("job-status").dataset.status = status;
    $("job-fail-reason").textContent = job.fail_reason ? `(${String(job.fail_reason)})` : "";
    const counters = job.counters || {};
    for (const name of COUNTERS) {
      $(`counter-${name}`).textContent = String(counters[name] ?? 0);
    }
    const progress = job.progress || {};
    const percent = typeof progress.percent === "number" ? progress.percent : null;
    const bar = $("job-progress");
    if (percent === null) {
      bar.removeAttribute("value");
      $("job-percent").textContent = "";
    } else {
      bar.value = status.startsWith("completed") ? 100 : percent;
      $("job-percent").textContent = `${percent.toFixed(1)} %`;
    }
    $("job-eta").textContent = TERMINAL.has(status) ? "—" : formatEta(job.eta_s);
    // The phase and the rate of the last few seconds, as the CLI bar shows them.
    $("job-phase").textContent = job.phase ? String(job.phase) : "—";
    const rate = progress.rows_per_s;
    $("job-rate").textContent =
      typeof rate === "number" && Number.isFinite(rate) ? `${formatRate(rate)} rows/s` : "—";
    const place = job.queue_position;
    $("job-queue").textContent =
      typeof place === "number" && Number.isFinite(place) ? `(queue position ${place})` : "";
    const ended = TERMINAL.has(status);
    $("job-cancel").disabled = ended || Boolean(job.cancel_requested);
    $("job-cancel").textContent = job.cancel_requested && !ended ? "Cancelling…" : "Cancel import";
    showValidation(job.validation);
    showPreview(job);
  }

  // --- the error threshold and the preview ----------------------------------------------------

  const NO_VALUE = "—";

  function showValidation(validation) {
    const line = $("job-validation");
    if (!validation || typeof validation !== "object") {
      line.hidden = true;
      line.textContent = "";
      return;
    }
    const verdict = validation.exceeded
      ? "exceeded: the import stopped before writing any contact"
      : "within it";
    line.textContent =
      `Validation: ${String(validation.invalid)} invalid of ${String(validation.rows_read)} ` +
      `rows, threshold ${String(validation.max_invalid)} — ${verdict}.`;
    line.hidden = false;
  }

  // A value before or after, as text: nothing is a dash, a channel's values a list.
  function shownValue(value) {
    if (value === null || value === undefined) {
      return NO_VALUE;
    }
    if (Array.isArray(value)) {
      return value.length ? value.map(String).join(", ") : NO_VALUE;
    }
    return String(value);
  }

  function renderPreviewFields(fields) {
    const body = $("preview-fields-body");
    body.replaceChildren();
    for (const [name, tally] of Object.entries(fields || {})) {
      const tr = document.createElement("tr");
      tr.dataset.field = name;
      const counts = tally || {};
      tr.append(
        cell(name),
        cell(String(counts.first ?? 0)),
        cell(String(counts.changed ?? 0)),
        cell(String(counts.kept ?? 0)),
      );
      body.append(tr);
    }
  }

  function renderNewCustomFields(names) {
    const list = $("preview-new-fields");
    list.replaceChildren();
    for (const name of Array.isArray(names) ? names : []) {
      const item = document.createElement("li");
      item.textContent = String(name);
      list.append(item);
    }
    $("preview-new-fields-none").hidden = list.children.length > 0;
  }

  // One row per changed field of each sampled contact; its line, key and action span them.
  function renderPreviewSample(sample) {
    const body = $("preview-sample-body");
    body.replaceChildren();
    const contacts = Array.isArray(sample) ? sample : [];
    for (const contact of contacts) {
      const changes = Object.entries(contact.fields || {});
      changes.forEach(([name, change], index) => {
        const tr = document.createElement("tr");
        tr.dataset.key = String(contact.key);
        tr.dataset.field = name;
        if (index === 0) {
          for (const text of [contact.line, contact.key, contact.action]) {
            const td = cell(String(text ?? ""));
            td.rowSpan = changes.length;
            tr.append(td);
          }
        }
        const values = change || {};
        tr.append(cell(name), cell(shownValue(values.before)), cell(shownValue(values.after)));
        body.append(tr);
      });
    }
    $("preview-sample-summary").textContent =
      `(${contacts.length} contact${contacts.length === 1 ? "" : "s"}, before → after)`;
  }

  // The document does not change once the preview rests: it is drawn once per job.
  function renderPreview(preview) {
    const counters = preview.counters || {};
    for (const name of COUNTERS) {
      $(`preview-${name}`).textContent = String(counters[name] ?? 0);
    }
    renderPreviewFields(preview.fields);
    renderNewCustomFields(preview.new_custom_fields);
    renderPreviewSample(preview.sample);
  }

  function previewState(status, waiting, differs) {
    if (status === "ready") {
      return waiting
        ? "— nothing written: apply it, or cancel it"
        : "— applied, waiting for a worker";
    }
    if (!TERMINAL.has(status)) {
      return "— being applied";
    }
    return typeof differs === "boolean" ? "— applied" : "— not applied";
  }

  function showPreviewOutcome(differs) {
    const line = $("preview-differs");
    if (typeof differs !== "boolean") {
      line.hidden = true;
      line.dataset.differs = "";
      line.textContent = "";
      return;
    }
    line.dataset.differs = String(differs);
    line.textContent = differs
      ? "The import's counters differ from the preview's: something wrote to this client's " +
        "contacts in between (or the run did not complete)."
      : "The import's counters equal the preview's.";
    line.hidden = false;
  }

  function showPreview(job) {
    const panel = $("preview-panel");
    const preview = job.preview && typeof job.preview === "object" ? job.preview : null;
    if (!preview) {
      panel.hidden = true;
      previewShown = null;
      return;
    }
    if (previewShown !== String(job.id)) {
      renderPreview(preview);
      previewShown = String(job.id);
    }
    const status = String(job.status);
    const waiting = status === "ready" && job.awaiting_apply === true;
    const differs = job.counters_differ_from_preview;
    $("preview-state").textContent = previewState(status, waiting, differs);
    const expires = $("preview-expires");
    expires.hidden = !(waiting && job.preview_expires_at);
    expires.textContent = expires.hidden
      ? ""
      : `Expires ${new Date(job.preview_expires_at).toLocaleString()} unless applied ` +
        "(then it is cancelled).";
    showPreviewOutcome(differs);
    $("apply").disabled = !waiting;
    $("apply").hidden = TERMINAL.has(status);
    panel.hidden = false;
  }

  async function applyPreview() {
    if (!watching) {
      return;
    }
    const id = watching.id;
    const button = $("apply");
    button.disabled = true;
    try {
      const response = await api(jobPath(id, "/apply"), { method: "POST" });
      showJob(await response.json());
      say(`Import ${id} applied: it runs now.`, "info");
      // Follow it on a fresh stream, as an upload's import is followed, until it ends.
      watch(id);
    } catch (error) {
      button.disabled = false;
      say(`Apply: ${error.message}`);
    }
  }

  function parseEvent(block) {
    let name = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line === "" || line.startsWith(":")) {
        continue;
      }
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) {
        value = value.slice(1);
      }
      if (field === "event") {
        name = value;
      } else if (field === "data") {
        data.push(value);
      }
    }
    return data.length ? { name, data: data.join("\n") } : null;
  }

  // Reads the job's event stream until `done`; true when the job ended.
  async function readEvents(id, signal) {
    const response = await api(jobPath(id, "/events"), {
      signal,
      headers: { Accept: "text/event-stream" },
    });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        return false;
      }
      buffer = (buffer + value).replace(/\r\n/g, "\n");
      let end = buffer.indexOf("\n\n");
      while (end >= 0) {
        const event = parseEvent(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (event && (event.name === "progress" || event.name === "done")) {
          showJob(JSON.parse(event.data));
          if (event.name === "done") {
            await reader.cancel();
            return true;
          }
        }
        end = buffer.indexOf("\n\n");
      }
    }
  }

  function stopWatching() {
    if (watching) {
      watching.controller.abort();
      watching = null;
    }
  }

  async function watch(id) {
    stopWatching();
    const controller = new AbortController();
    const mine = { id, controller };
    watching = mine;
    $("report").hidden = true;
    $("job-stream").textContent = "";
    previewShown = null;
    try {
      showJob(await (await api(jobPath(id), { signal: controller.signal })).json());
      for (let attempt = 0; attempt <= MAX_RECONNECTS; attempt += 1) {
        if (await readEvents(id, controller.signal)) {
          break;
        }
        // The stream ended early (the server drains, the network dropped): look, then retry.
        const job = await (await api(jobPath(id), { signal: controller.signal })).json();
        showJob(job);
        if (TERMINAL.has(String(job.status))) {
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, RECONNECT_DELAY_MS));
      }
      if (watching === mine) {
        $("job-stream").textContent = "";
        loadHistory(true);
      }
    } catch (error) {
      if (!controller.signal.aborted) {
        $("job-stream").textContent = "(live progress stopped)";
        say(`Progress: ${error.message}`);
      }
    }
  }

  async function cancelJob() {
    if (!watching) {
      return;
    }
    try {
      const response = await api(jobPath(watching.id, "/cancel"), { method: "POST" });
      showJob(await response.json());
      say("Cancel requested.", "info");
    } catch (error) {
      say(`Cancel: ${error.message}`);
    }
  }

  // --- the error report -----------------------------------------------------------------------

  async function viewReport() {
    if (!watching) {
      return;
    }
    const id = watching.id;
    try {
      // JSON lines carry the raw values; the page shows them as text.
      const text = await (await api(jobPath(id, "/errors?format=jsonl"))).text();
      const lines = text.split("\n").filter((line) => line.trim() !== "");
      const head = $("report-head");
      const body = $("report-body");
      head.replaceChildren();
      body.replaceChildren();
      const columns = ["line", "column", "reason", "severity", "value"];
      for (const name of columns) {
        const th = document.createElement("th");
        th.textContent = name;
        head.append(th);
      }
      for (const line of lines.slice(0, REPORT_ROWS_SHOWN)) {
        const row = JSON.parse(line);
        const tr = document.createElement("tr");
        for (const name of columns) {
          const td = document.createElement("td");
          const value = row[name];
          td.textContent = value === null || value === undefined ? "" : String(value);
          tr.append(td);
        }
        body.append(tr);
      }
      const shown = Math.min(lines.length, REPORT_ROWS_SHOWN);
      $("report-summary").textContent =
        lines.length > shown
          ? `(${lines.length} rows, the first ${shown} shown)`
          : `(${lines.length} rows)`;
      $("report").hidden = false;
    } catch (error) {
      say(`Error report: ${error.message}`);
    }
  }

  async function downloadReport() {
    if (!watching) {
      return;
    }
    const id = watching.id;
    try {
      const blob = await (await api(jobPath(id, "/errors?format=csv"))).blob();
      const url = URL.createObjectURL(blob);
      const link = document.createElement("a");
      link.href = url;
      link.download = `import-${id}-errors.csv`;
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
    } catch (error) {
      say(`Error report: ${error.message}`);
    }
  }

  // --- history and layouts --------------------------------------------------------------------

  function cell(text) {
    const td = document.createElement("td");
    td.textContent = text;
    return td;
  }

  function historyRow(job) {
    const tr = document.createElement("tr");
    tr.dataset.jobId = String(job.id);
    const created = job.created_at ? new Date(job.created_at).toLocaleString() : "";
    const counters = job.counters || {};
    tr.append(
      cell(created),
      cell(job.filename ? String(job.filename) : ""),
      cell(String(job.status)),
      cell(String(job.conflict_strategy)),
      cell(String(counters.rows_read ?? 0)),
      cell(String(counters.inserted ?? 0)),
      cell(String(counters.updated ?? 0)),
      cell(String(counters.invalid ?? 0)),
    );
    const open = document.createElement("button");
    open.type = "button";
    open.textContent = "Open";
    // An import uploaded and not started opens at its columns step.
    open.addEventListener("click", () =>
      job.status === "uploaded"
        ? showColumns(String(job.id)).catch((error) => say(`Columns: ${error.message}`))
        : watch(String(job.id)),
    );
    const td = document.createElement("td");
    td.append(open);
    tr.append(td);
    return tr;
  }

  async function loadHistory(reset) {
    if (!token()) {
      return;
    }
    const params = new URLSearchParams({ limit: String(HISTORY_PAGE) });
    if (!reset && historyCursor) {
      params.set("cursor", historyCursor);
    }
    try {
      const page = await (await api(`/v1/imports?${params}`)).json();
      const body = $("history-body");
      if (reset) {
        body.replaceChildren();
      }
      for (const job of page.items) {
        body.append(historyRow(job));
      }
      historyCursor = page.next_cursor || null;
      $("history-more").hidden = !historyCursor;
    } catch (error) {
      say(`History: ${error.message}`);
    }
  }

  async function loadLayouts() {
    const select = $("layout_id");
    for (const option of [...select.options].slice(1)) {
      option.remove();
    }
    if (!token()) {
      return;
    }
    try {
      const page = await (await api("/v1/layouts")).json();
      for (const layout of page.items) {
        const option = document.createElement("option");
        option.value = String(layout.id);
        option.textContent = `${String(layout.name)} (#${String(layout.id)})`;
        select.append(option);
      }
    } catch {
      // A token without CONTACT_IMPORT.CREATE cannot list layouts: imports without one.
    }
  }

  // --- the columns step -----------------------------------------------------------------------

  const BUILT_IN_TARGETS = [
    ["name", "Name"],
    ["cpf_cnpj", "CPF/CNPJ"],
    ["street_address", "Street address"],
    ["phone", "Phone (SMS)"],
    ["whatsapp", "WhatsApp"],
    ["email", "E-mail"],
    ["journey", "Journey"],
  ];
  let columnsShown = null; // {id, columns} of the job whose columns the table holds

  function targetValue(target, field) {
    if (target === "custom_field" && field) {
      return `custom_field:${String(field.id)}`;
    }
    return String(target);
  }

  function option(value, label) {
    const item = document.createElement("option");
    item.value = value;
    item.textContent = label;
    return item;
  }

  function targetSelect(column, customFields, mapped) {
    const select = document.createElement("select");
    select.id = `column-target-${column.position}`;
    select.className = "column-target";
    select.setAttribute("aria-label", `import column ${column.position} as`);
    for (const [value, label] of BUILT_IN_TARGETS) {
      select.append(option(value, label));
    }
    for (const field of customFields) {
      select.append(option(`custom_field:${String(field.id)}`, `Custom field: ${String(field.name)}`));
    }
    const proposed = mapped ? column.custom_field : column.suggestion.custom_field;
    const newName =
      proposed && proposed.id === null ? String(proposed.name) : String(column.header).trim();
    if (newName) {
      const created = option("new_custom_field", `New custom field: ${newName}`);
      created.dataset.name = newName;
      select.append(created);
    }
    select.append(option("ignore", "Ignore"));
    // Once a mapping is set, the select shows it; before, the suggestion (saved with the rest).
    select.value = mapped
      ? targetValue(column.target, column.custom_field)
      : targetValue(column.suggestion.target, column.suggestion.custom_field);
    return select;
  }

  function reasonText(suggestion) {
    const confidence = `${Math.round(Number(suggestion.confidence) * 100)} %`;
    const target = suggestion.custom_field
      ? `${String(suggestion.target)} ${String(suggestion.custom_field.name)}`
      : String(suggestion.target);
    const share =
      typeof suggestion.share === "number"
        ? `, ${Math.round(suggestion.share * 100)} % of the samples`
        : "";
    return `${target} — ${String(suggestion.reason)}${share} (${confidence})`;
  }

  function markNewField(row, select) {
    row.classList.toggle("new-field", select.value === "new_custom_field");
  }

  function columnRow(column, customFields, mapped) {
    const row = document.createElement("tr");
    row.dataset.position = String(column.position);
    row.append(cell(String(column.position)));
    row.append(cell(String(column.header) || "(no header)"));
    const samples = cell(column.samples.map(String).join(" · ") || NO_VALUE);
    samples.className = "samples";
    row.append(samples);
    const choose = document.createElement("td");
    const select = targetSelect(column, customFields, mapped);
    select.addEventListener("change", () => markNewField(row, select));
    choose.append(select);
    row.append(choose);
    const reason = cell(reasonText(column.suggestion));
    reason.className = "reason";
    reason.id = `column-reason-${column.position}`;
    reason.dataset.reason = String(column.suggestion.reason);
    row.append(reason);
    markNewField(row, select);
    return row;
  }

  async function showColumns(id) {
    const document_ = await (await api(jobPath(id, "/columns"))).json();
    columnsShown = { id, columns: document_.columns };
    $("columns-job").textContent = id;
    const body = $("columns-body");
    body.replaceChildren(
      ...document_.columns.map((column) =>
        columnRow(column, document_.custom_fields, document_.mapped === true),
      ),
    );
    $("columns-start").disabled = false;
    $("columns").hidden = false;
  }

  function chosenMapping() {
    const columns = [];
    for (const row of $("columns-body").rows) {
      const position = Number(row.dataset.position);
      const select = $(`column-target-${position}`);
      const value = select.value;
      if (value === "ignore") {
        continue;
      }
      if (value.startsWith("custom_field:")) {
        const id = Number(value.slice("custom_field:".length));
        columns.push({ position, target: "custom_field", custom_field_id: id });
      } else if (value === "new_custom_field") {
        const name = select.selectedOptions[0].dataset.name;
        columns.push({ position, target: "new_custom_field", name });
      } else {
        columns.push({ position, target: value });
      }
    }
    return { columns };
  }

  async function startWithColumns() {
    if (!columnsShown) {
      return;
    }
    const id = columnsShown.id;
    const button = $("columns-start");
    button.disabled = true;
    try {
      await api(jobPath(id, "/columns"), {
        method: "PUT",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(chosenMapping()),
      });
      await api(jobPath(id, "/start"), { method: "POST" });
      say(`Import ${id} queued with your columns.`, "info");
      $("columns").hidden = true;
      columnsShown = null;
      loadHistory(true);
      watch(id);
    } catch (error) {
      button.disabled = false;
      say(`Columns: ${error.message}`);
    }
  }

  async function forgetColumns() {
    try {
      const result = await (await api("/v1/columns/memory", { method: "DELETE" })).json();
      say(`Forgot ${String(result.forgotten)} remembered column(s).`, "info");
    } catch (error) {
      say(`Forget: ${error.message}`);
    }
  }

  // --- upload ---------------------------------------------------------------------------------

  async function upload(event) {
    event.preventDefault();
    const file = $("file").files[0];
    if (!file) {
      say("Choose a file.");
      return;
    }
    const form = new FormData();
    form.append("conflict_strategy", $("conflict_strategy").value);
    for (const name of ["has_sensitive_data", "has_underage_data", "has_internationalization"]) {
      form.append(name, $(name).checked ? "true" : "false");
    }
    form.append("data_processing_purpose", $("data_processing_purpose").value);
    form.append("lgpd_processing_hypothesis", $("lgpd_processing_hypothesis").value);
    const preview = $("preview").checked;
    form.append("preview", preview ? "true" : "false");
    const maxInvalid = $("max-invalid").value.trim();
    if (maxInvalid) {
      form.append("max_invalid", maxInvalid);
    }
    for (const name of ["format", "layout_id", "tags"]) {
      const value = $(name).value.trim();
      if (value) {
        form.append(name, value);
      }
    }
    const reviewColumns = $("columns-review").checked;
    if (reviewColumns) {
      form.append("start", "false");
    }
    form.append("file", file, file.name);
    const button = $("upload-submit");
    button.disabled = true;
    say("Uploading…", "info");
    try {
      // Multipart creates the job and queues it (202), or with start=false leaves it uploaded
      // (201) for the columns step, started from there.
      const job = await (await api("/v1/imports", { method: "POST", body: form })).json();
      if (reviewColumns) {
        say(`Uploaded ${String(job.id)}: check its columns, then start it.`, "info");
        loadHistory(true);
        await showColumns(String(job.id));
        return;
      }
      say(
        preview
          ? `Preview ${String(job.id)} queued: nothing is written until you apply it.`
          : `Import ${String(job.id)} queued.`,
        "info",
      );
      loadHistory(true);
      watch(String(job.id));
    } catch (error) {
      say(`Upload: ${error.message}`);
    } finally {
      button.disabled = false;
    }
  }

  // --- wiring ---------------------------------------------------------------------------------

  function start() {
    $("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const value = $("token").value.trim().replace(/^Bearer\s+/i, "");
      if (!value) {
        return;
      }
      sessionStorage.setItem(TOKEN_KEY, value);
      $("token").value = "";
      say("");
      showTokenState();
      loadHistory(true);
      loadLayouts();
    });
    $("token-clear").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      stopWatching();
      $("job").hidden = true;
      $("history-body").replaceChildren();
      $("history-more").hidden = true;
      showTokenState();
      loadLayouts();
    });
    $("upload-form").addEventListener("submit", upload);
    $("preview").addEventListener("change", () => {
      $("upload-submit").textContent = $("preview").checked
        ? "Upload and preview"
        : "Upload and import";
    });
    $("columns-start").addEventListener("click", startWithColumns);
    $("columns-forget").addEventListener("click", forgetColumns);
    $("apply").addEventListener("click", applyPreview);
    $("job-cancel").addEventListener("click", cancelJob);
    $("report-view").addEventListener("click", viewReport);
    $("report-download").addEventListener("click", downloadReport);
    $("history-refresh").addEventListener("click", () => loadHistory(true));
    $("history-more").addEventListener("click", () => loadHistory(false));
    showTokenState();
    loadHistory(true);
    loadLayouts();
  }

  start();
})();
