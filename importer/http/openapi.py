"""The API's documented shapes (OpenAPI at ``/openapi.json``, ``/docs``).

These pydantic models describe the wire format for the schema; the API validates requests with
the plain functions of ``core/options.py`` (one validator for form fields and JSON alike) and
writes responses with :func:`~importer.services.documents.job_document`.
``tests/unit/test_openapi.py`` keeps the two in step: every documented option is one the
validator knows, and the other way round.
"""

from __future__ import annotations

import datetime as dt
import typing
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field

from importer.core.models import JobStatus

# --- errors -----------------------------------------------------------------------------------


class ErrorBody(BaseModel):
    error: str = Field(description="a stable code: not_found, import_already_applied, …")
    message: str


class FieldProblem(BaseModel):
    field: str
    message: str


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The documented error answers of a route: 400 is a list of field problems."""
    described = {
        400: "invalid request: a list of {field, message}",
        401: "missing, malformed, expired or badly signed bearer token",
        403: "the token lacks the permission",
        404: "no such object in the caller's tenant",
        409: "the job's status does not allow this",
        413: "the upload is larger than IMPORTER_MAX_UPLOAD_BYTES",
        415: "unsupported Content-Type",
        429: "too many imports created (IMPORTER_RATE_LIMIT_PER_MINUTE): see Retry-After",
        503: "the database or the object store is unavailable",
    }
    responses: dict[int | str, dict[str, Any]] = {}
    for status in (400, 401, 403, *statuses, 503):
        model: Any = list[FieldProblem] if status == 400 else ErrorBody
        responses[status] = {"model": model, "description": described[status]}
    return responses


# --- jobs -------------------------------------------------------------------------------------


class CountersBody(BaseModel):
    rows_read: int
    inserted: int
    updated: int
    invalid: int
    error: int
    ignored: int


class ProgressBody(BaseModel):
    rows: int
    bytes: int
    bytes_total: int | None
    percent: float | None
    rows_per_s: float | None = Field(
        description="rows committed per second over the last 10 s; null when not running"
    )


class WarningBody(BaseModel):
    code: Literal["suspect_encoding"]
    message: str


class JobBody(BaseModel):
    id: uuid.UUID
    status: JobStatus
    phase: Literal["reading", "applying", "finalizing"] | None = Field(
        description="while running: reading (no batch committed yet), applying (batches "
        "committed, reading may go on), finalizing (the file is read: the last batches and the "
        "finalization); null otherwise"
    )
    queue_position: int | None = Field(
        description="a queued job's place in the claim's order (1: the next claim takes it); "
        "null otherwise"
    )
    conflict_strategy: Literal["merge", "discard"]
    format: Literal["csv", "jsonl", "xlsx"]
    filename: str | None
    size: int | None
    sha256: str | None
    user_id: str | None
    counters: CountersBody
    progress: ProgressBody
    eta_s: float | None = Field(
        description="seconds left: the bytes to read at the byte rate of the last 10 s; null if "
        "unknown"
    )
    fail_reason: str | None
    warnings: list[WarningBody] = Field(
        default_factory=list,
        description="file-level warnings: the import ran, a person should look (see `code`)",
    )
    cancel_requested: bool
    journey_id: int | None
    tags: list[str]
    max_invalid: str | None = Field(
        default=None, description="the error threshold asked for: a count, or a percentage"
    )
    duplicates_report: bool = Field(
        default=True, description="the duplicate-resolution report is kept (GET …/duplicates)"
    )
    validation: dict[str, Any] | None = Field(
        default=None,
        description="what validating the whole file found (with max_invalid, or a preview): "
        "rows_read, invalid, max_invalid, exceeded",
    )
    preview: dict[str, Any] | None = Field(
        default=None,
        description="a preview's document (create with `preview: true`): counters it would end "
        "with; per target field (name, street_address, custom:<name>, channel:<name>) how many "
        "contacts get a first value, a changed one, or keep theirs; new_custom_fields; a "
        "sample of up to 20 contacts with before and after",
    )
    awaiting_apply: bool = Field(
        default=False, description="a preview resting in `ready`: POST /apply imports it"
    )
    preview_expires_at: dt.datetime | None = Field(
        default=None, description="when a preview nobody applied is cancelled"
    )
    report_rows_left_out: int = Field(
        default=0,
        description="the error report's rows (invalid rows, warnings) counted past its cap "
        "(IMPORTER_MAX_ROW_ERRORS) and not stored; the counters count every row",
    )
    counters_differ_from_preview: bool | None = Field(
        default=None,
        description="an applied preview's import, once ended: its counters differ from the "
        "preview's (something wrote in between); null otherwise",
    )
    created_at: dt.datetime
    updated_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None


class JobPageBody(BaseModel):
    items: list[JobBody]
    next_cursor: str | None = Field(
        description="pass as ?cursor= for the next page; null at the end"
    )


class UploadTargetBody(BaseModel):
    url: str
    method: Literal["PUT"]
    expires_in_s: int
    presigned: bool = Field(description="true: the object store's URL; false: this server's")


class UploadCreatedBody(BaseModel):
    job: JobBody
    upload: UploadTargetBody


class StoredObjectBody(BaseModel):
    key: str
    size: int
    sha256: str


# --- request bodies ---------------------------------------------------------------------------


class ImportOptionsBody(BaseModel):
    """Options of a new import. Booleans and integers may be sent as form strings."""

    conflict_strategy: Literal["merge", "discard", "ignore"] = Field(
        description="ignore is the form's legacy name of discard"
    )
    has_sensitive_data: bool
    has_underage_data: bool
    data_processing_purpose: str
    lgpd_processing_hypothesis: int
    has_internationalization: bool = False
    journey_id: int | None = None
    auto_start_journey_mailing: bool | None = Field(
        default=None, description="required when journey_id is given"
    )
    tags: list[str] | str | None = Field(default=None, description="a JSON list or a comma list")
    layout: dict[str, Any] | str | None = Field(
        default=None, description="a layout document, as the CLI's --layout file holds it"
    )
    layout_id: int | None = Field(default=None, description="a stored layout (/v1/layouts)")
    format: Literal["csv", "jsonl", "xlsx"] | None = Field(
        default=None, description="default: from the file name"
    )
    preview: bool = Field(
        default=False,
        description="plan the whole file against the client's contacts, write none, and rest "
        "in `ready` with the `preview` document until POST /apply (or until it expires)",
    )
    max_invalid: int | str | None = Field(
        default=None,
        description="fail (too_many_invalid_rows) before writing any contact when more rows "
        'than this count, or percentage such as "2%", are invalid',
    )
    notify_url: str | None = Field(
        default=None,
        description="the completion webhook: the job document is POSTed here when the import "
        "ends, signed with the client's webhook secret (X-Importer-Signature); https to a "
        "public address only (default: the client's notify_url, if set)",
    )
    duplicates_report: bool = Field(
        default=True,
        description="keep the duplicate-resolution report (GET /v1/imports/{job_id}/duplicates);"
        " false: nothing is computed",
    )


class MultipartImportForm(ImportOptionsBody):
    file: bytes = Field(description="the CSV, JSONL or XLSX file (optionally .gz); streamed")
    start: bool = Field(
        default=True,
        description="false: the job stays `uploaded` (201) for its columns step; start it "
        "with POST /v1/imports/{job_id}/start",
    )


class HsmImportForm(ImportOptionsBody):
    file: bytes = Field(description="the CSV, JSONL or XLSX file (optionally .gz); streamed")
    intent: str = Field(description='JSON: {"kind": "hsm"|"sms"|"email", "params": {...}}')


class ImportFromKeyBody(ImportOptionsBody):
    key: str = Field(description="an object key starting with '<client_id>/'")
    size: int
    sha256: str
    filename: str | None = None


class UploadRequestBody(ImportOptionsBody):
    filename: str
    size: int
    sha256: str


class StartBody(BaseModel):
    operation_id: str | None = Field(
        default=None, description="or the Idempotency-Key header; recorded on the job"
    )


class LayoutBody(BaseModel):
    name: str
    document: dict[str, Any]


class LayoutOut(LayoutBody):
    id: int
    created_at: dt.datetime
    updated_at: dt.datetime


class LayoutListBody(BaseModel):
    items: list[LayoutOut]


def request_body(content: dict[str, type[BaseModel]]) -> dict[str, Any]:
    """An ``openapi_extra`` request body: media type → the model's (flat) JSON schema."""
    media = {kind: {"schema": model.model_json_schema()} for kind, model in content.items()}
    return {"requestBody": {"required": True, "content": media}}


# --- owner operations -------------------------------------------------------------------------


class UndoneBody(BaseModel):
    job: JobBody
    slices: int = Field(description="the undo's slices this call ran (0: undone already)")


class RequeuedBody(BaseModel):
    job: JobBody
    run: int = Field(description="the run the requeue starts (1 was the first)")


class RemovedCountsBody(BaseModel):
    contacts: int = Field(description="contacts the import created, now soft-deleted")
    details: int = Field(description="their channels, soft-deleted")
    chunks: int = Field(description="ledger rows cleared: a requeue reads the whole file again")
    row_errors: int = Field(description="per-row report rows cleared")
    removed_at: dt.datetime


class RemovedDataBody(BaseModel):
    job: JobBody
    removed: RemovedCountsBody


class DeadLetterBody(BaseModel):
    message_id: str | None
    job_id: uuid.UUID | None
    chunk: int | None
    partition: int | None
    error: str | None
    attempts: int = Field(description="failed deliveries so far (carried across replays)")
    dead_lettered_at: str | None
    job_status: JobStatus | None


class DeadLetterListBody(BaseModel):
    items: list[DeadLetterBody]
    scanned: int = Field(description="messages looked at (every client's), at most 1000")
    more: bool


class SkippedLetterBody(BaseModel):
    message_id: str | None
    job_id: uuid.UUID | None
    chunk: int | None
    partition: int | None
    error: str | None
    attempts: int
    dead_lettered_at: str | None
    reason: Literal["job_ended", "unknown_import", "malformed"]


class ReplayBody(BaseModel):
    replayed: int
    replayed_ids: list[str | None]
    skipped: list[SkippedLetterBody] = Field(
        description="left in the queue: job_ended → requeue the import instead"
    )
    scanned: int


class WebhookSettingsBody(BaseModel):
    notify_url: str | None = Field(
        default=None,
        description="the client's imports' default notify_url (null: none); https to a public "
        "address (checked like a create's)",
    )
    secret: str | None = Field(
        default=None,
        description="a new signing secret (16+ characters); omitted: the current one is kept, "
        "or one is generated when the client has none",
    )
    new_secret: bool = Field(default=False, description="generate a new secret (a rotation)")


class WebhookBody(BaseModel):
    client_id: int
    notify_url: str | None
    secret_set: bool = Field(description="the secret itself is shown only by PUT")


class WebhookSecretBody(BaseModel):
    client_id: int
    notify_url: str | None
    secret: str = Field(description="the signing secret: the receiver verifies with it")


# --- the columns step (issue 29) ----------------------------------------------------------------

ColumnTargetWord = Literal[
    "name",
    "cpf_cnpj",
    "street_address",
    "phone",
    "whatsapp",
    "email",
    "journey",
    "custom_field",
    "new_custom_field",
    "ignore",
]


class CustomFieldBody(BaseModel):
    id: int | None = Field(description="the client's field; null: a field the import creates")
    name: str


class SuggestionBody(BaseModel):
    target: ColumnTargetWord
    custom_field: CustomFieldBody | None
    reason: Literal["memory", "alias", "custom_field", "values", "unmatched"] = Field(
        description="memory: this client mapped this header before; alias: the header names "
        "the target; custom_field: an existing field's name; values: the sampled values look "
        "like it (share); unmatched: nothing did (a new custom field, or ignore)"
    )
    confidence: float = Field(ge=0, le=1)
    share: float | None = Field(description="values: the share of samples that matched")


class ColumnBody(BaseModel):
    position: int
    header: str
    samples: list[str] = Field(description="up to 5 values of the first rows, formula-safe")
    suggestion: SuggestionBody
    target: ColumnTargetWord = Field(
        description="what the import does as it stands: the mapping set (or the job's "
        "layout), else the header aliases"
    )
    custom_field: CustomFieldBody | None


class ColumnsBody(BaseModel):
    import_id: uuid.UUID
    mapped: bool = Field(description="a mapping is set (PUT), else the targets are suggestions")
    columns: list[ColumnBody]
    custom_fields: list[CustomFieldBody] = Field(description="the client's custom fields")


COLUMN_MAPPING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["columns"],
    "additionalProperties": False,
    "properties": {
        "columns": {
            "type": "array",
            "description": "the columns to import; a column left out is ignored",
            "items": {
                "type": "object",
                "required": ["position", "target"],
                "additionalProperties": False,
                "properties": {
                    "position": {"type": "integer", "minimum": 0},
                    "target": {"type": "string", "enum": list(typing.get_args(ColumnTargetWord))},
                    "custom_field_id": {
                        "type": "integer",
                        "description": "target custom_field: the client's field",
                    },
                    "name": {
                        "type": "string",
                        "description": "target new_custom_field: its name (default: the header)",
                    },
                },
            },
        }
    },
}


class MemoryEntryBody(BaseModel):
    header_key: str = Field(description="the header, case, accents and separators folded")
    target: str = Field(description="a layout word: name, phone, custom:<field>, ignore…")
    uses: int
    last_used_at: dt.datetime


class MemoryBody(BaseModel):
    items: list[MemoryEntryBody]


class ForgottenBody(BaseModel):
    forgotten: int = Field(description="entries removed")
