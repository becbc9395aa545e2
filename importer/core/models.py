"""Domain values shared by every layer: frozen dataclasses and str enums.

Enum values equal the values stored by ``schema.sql``; nothing here does I/O.

Why this module is long: it is the vocabulary every layer shares (a job, its counters, its
rows, batches and views); split by type it would only move the same definitions into files
that import each other.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import MemberDescriptorType


class JobStatus(enum.StrEnum):
    UPLOADING = "uploading"
    UPLOADED = "uploaded"
    QUEUED = "queued"
    NORMALIZING = "normalizing"
    READY = "ready"
    IMPORTING = "importing"
    COMPLETED = "completed"
    COMPLETED_WITH_PLACEHOLDERS = "completed_with_placeholders"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # An ended import taken back (issue 15): the undo's slices run (resumable), then it ends.
    UNDOING = "undoing"
    UNDONE = "undone"


TERMINAL_STATUSES = frozenset(
    {
        JobStatus.COMPLETED,
        JobStatus.COMPLETED_WITH_PLACEHOLDERS,
        JobStatus.FAILED,
        JobStatus.CANCELLED,
        JobStatus.UNDONE,
    }
)


class ConflictStrategy(enum.StrEnum):
    """How a row whose key already exists is applied (SPEC "Conflict strategies")."""

    MERGE = "merge"
    DISCARD = "discard"

    @classmethod
    def parse(cls, raw: str) -> ConflictStrategy:
        """Accept the form's legacy name ``IGNORE`` as DISCARD, case-insensitively."""
        value = raw.strip().lower()
        if value == "ignore":
            return cls.DISCARD
        return cls(value)


class InputFormat(enum.StrEnum):
    CSV = "csv"
    JSONL = "jsonl"
    XLSX = "xlsx"


class Channel(enum.IntEnum):
    """``contact_details.channel_id`` values (seed 003)."""

    PHONE = 1
    WHATSAPP = 2
    EMAIL = 3
    JOURNEY = 4


class Attribute(enum.StrEnum):
    """Contact columns a file column can map to."""

    NAME = "name"
    CPF_CNPJ = "cpf_cnpj"
    STREET_ADDRESS = "street_address"


class Reason(enum.StrEnum):
    """Stable reason codes of the per-row error report and of file-level failures."""

    # row invalid
    MISSING_CPF_CNPJ = "missing_cpf_cnpj"
    INVALID_CPF_CNPJ_FORMAT = "invalid_cpf_cnpj_format"
    INVALID_CPF = "invalid_cpf"
    INVALID_CNPJ = "invalid_cnpj"
    TOO_MANY_FIELDS = "too_many_fields"
    TOO_FEW_FIELDS = "too_few_fields"
    FIELD_TOO_LONG = "field_too_long"
    INVALID_ENCODING = "invalid_encoding"
    NUL_BYTE = "nul_byte"
    MALFORMED_JSON = "malformed_json"
    NOT_AN_OBJECT = "not_an_object"
    # row invalid under a layout's other dedupe key (core.keys)
    MISSING_KEY = "missing_key"  # the row has no (valid) value of the key channel
    AMBIGUOUS_KEY = "ambiguous_key"  # two live stored contacts have the value: never a guess
    # warnings: the value is dropped, the row imports
    INVALID_PHONE = "invalid_phone"
    INVALID_EMAIL = "invalid_email"
    VALUE_TOO_LONG = "value_too_long"
    # row error: applied rows lost after all retries
    CHUNK_DISCARDED = "chunk_discarded"
    # row error: the database refused this row alone (its batch was split down to it)
    ROW_REJECTED = "row_rejected"
    # file-level warning: the job imports, a person should look (``Job.warnings``)
    SUSPECT_ENCODING = "suspect_encoding"
    # file level
    EMPTY_FILE = "empty_file"
    MISSING_REQUIRED_COLUMN = "missing_required_column"
    DUPLICATE_COLUMN = "duplicate_column"
    UNSUPPORTED_ENCODING = "unsupported_encoding"
    FILE_TOO_LARGE = "file_too_large"
    DECOMPRESSED_TOO_LARGE = "decompressed_too_large"
    CHECKSUM_MISMATCH = "checksum_mismatch"
    INVALID_LAYOUT = "invalid_layout"
    TOO_MANY_COLUMNS = "too_many_columns"
    SOURCE_UNREADABLE = "source_unreadable"
    UNREADABLE_WORKBOOK = "unreadable_workbook"  # XLSX: corrupt, truncated or password-protected
    INTERNAL_ERROR = "internal_error"
    TOO_MANY_INVALID_ROWS = "too_many_invalid_rows"  # the file's invalid rows exceed max_invalid
    ALL_BATCHES_FAILED = "all_batches_failed"  # no batch wrote a row: every one failed


class Severity(enum.StrEnum):
    INVALID = "invalid"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Phone:
    """A phone number normalized to E.164."""

    e164: str
    country_code: int
    country: str | None


@dataclass(frozen=True, slots=True)
class Detail:
    """One channel value of a row (``contact_details``)."""

    channel: Channel
    value: str
    country_code: int | None = None
    country: str | None = None


@dataclass(frozen=True, slots=True)
class RowIssue:
    """An invalid row or a warning, as it goes to the per-row error table."""

    line: int
    column: str | None
    reason: Reason
    value: str | None
    severity: Severity


@dataclass(frozen=True, slots=True)
class JobWarning:
    """A file-level warning of a job (``import_job.warnings``): one per code."""

    code: Reason  # SUSPECT_ENCODING
    message: str

    def as_issue(self) -> RowIssue:
        """The warning as the first row of the error report: line 0, no column."""
        return RowIssue(0, None, self.code, self.message, Severity.WARNING)


@dataclass(frozen=True, slots=True)
class ContactRow:
    """A valid row, normalized: its key and the values it brings (empty values are None)."""

    line: int
    cpf_cnpj: str
    name: str | None
    street_address: str | None
    details: tuple[Detail, ...] = ()
    custom_fields: tuple[tuple[str, str], ...] = ()  # (custom field name, value)


@dataclass(slots=True)
class Counters:
    """The job's row accounting; ``rows_read`` always equals the sum of the other five."""

    rows_read: int = 0
    inserted: int = 0
    updated: int = 0
    invalid: int = 0
    error: int = 0
    ignored: int = 0

    def add(self, other: Counters) -> None:
        self.rows_read += other.rows_read
        self.inserted += other.inserted
        self.updated += other.updated
        self.invalid += other.invalid
        self.error += other.error
        self.ignored += other.ignored

    @property
    def balanced(self) -> bool:
        total = self.inserted + self.updated + self.invalid + self.error + self.ignored
        return self.rows_read == total


@dataclass(frozen=True, slots=True)
class Job:
    """An import job as stored in ``import_job``."""

    id: uuid.UUID
    client_id: int
    status: JobStatus
    strategy: ConflictStrategy
    source: str
    input_format: InputFormat
    chunk_size: int
    partitions: int
    user_id: str | None = None
    fail_reason: str | None = None
    counters: Counters = field(default_factory=Counters)
    source_size: int | None = None  # sealed size and sha256 of the stored upload
    source_sha256: str | None = None
    filename: str | None = None  # the name the user gave the file (``.gz`` is spotted by it)
    layout: dict[str, object] | None = None  # the stored layout document (parse_layout)
    has_internationalization: bool = False
    # The worker holding the job's lease (None for an in-process run, the CLI's): every write
    # of its run is fenced by it.
    lease_owner: str | None = None
    cancel_requested: bool = False
    # The journey the import feeds (seed 003 §9): its rows' journey channels join it.
    journey_id: int | None = None
    warnings: tuple[JobWarning, ...] = ()  # file-level warnings (suspect_encoding)
    local_path: str | None = None  # a command-line import's file (absolute path)
    # Preview, then apply: a preview run rests the job in ``ready`` with its document
    # (``awaiting_apply``, claimed by no worker) until an apply hands it to a run again.
    preview_requested: bool = False
    awaiting_apply: bool = False
    preview: dict[str, object] | None = None
    max_invalid: str | None = None  # the error threshold ("100", "2%"): validate first
    validation: dict[str, object] | None = None  # what the validation of the whole file found
    preview_applied: bool = False  # the preview's apply came (its run imports the file)
    duplicates_report: bool = True  # its batches write the duplicate report (core.duplicates)
    journaled: bool = True  # its batches write the undo journal (IMPORTER_UNDO_JOURNAL)

    @property
    def previews(self) -> bool:
        """This job's next run is a preview (one was asked for and none was made yet)."""
        return self.preview_requested and self.preview is None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where a resumed run starts reading: just after chunk ``chunk_no``, the last of the prefix
    of chunks every partition committed whole (the reader's byte offset and line there)."""

    chunk_no: int
    end_offset: int
    end_line: int


@dataclass(frozen=True, slots=True)
class Batch:
    """The rows of one chunk that fall in one key partition: the unit of commit.

    Partition 0 also carries the chunk's invalid rows and every issue of the chunk, so each
    row read is counted by exactly one batch.

    ``part`` numbers the pieces of a batch the database refused and the importer split
    (``lifecycle.split_batch``), heap-style: 1 is the whole batch, the halves of piece ``p`` are
    ``2p`` and ``2p + 1``. Every piece has its own ledger row.
    """

    chunk_no: int
    partition: int
    first_line: int
    end_offset: int
    rows: tuple[ContactRow, ...]
    issues: tuple[RowIssue, ...] = ()
    invalid: int = 0
    part: int = 1
    end_line: int = 0  # the line after the chunk's last record (with end_offset: its checkpoint)

    @property
    def rows_read(self) -> int:
        return len(self.rows) + self.invalid

    @property
    def key(self) -> tuple[int, int, int]:
        """The ledger's identity of the batch (or of one of its pieces)."""
        return (self.chunk_no, self.partition, self.part)


@dataclass(frozen=True, slots=True)
class NewJob:
    """What creating an import needs; the store assigns nothing else."""

    id: uuid.UUID
    client_id: int
    user_id: str | None
    source: str
    input_format: str
    strategy: str
    chunk_size: int
    partitions: int
    layout: dict[str, object] | None = None
    has_internationalization: bool = False
    bytes_total: int | None = None
    journey_id: int | None = None
    auto_start_journey_mailing: bool | None = None
    source_size: int | None = None  # sealed: the worker verifies the stored bytes against them
    source_sha256: str | None = None
    filename: str | None = None
    has_sensitive_data: bool = False
    has_underage_data: bool = False
    data_processing_purpose: str | None = None
    lgpd_processing_hypothesis: int | None = None
    tags: Sequence[str] | None = None
    kind: str = "contacts"
    # The creating process runs the job itself (the CLI): no worker claims it. It is created
    # under this lease of its own (renewed by its heartbeat).
    in_process: bool = False
    lease_owner: str | None = None
    lease_s: float = 0.0
    local_path: str | None = None  # the CLI's file (absolute), sealed by source_size/sha256
    preview: bool = False  # run a preview first, rest in ``ready`` until an apply
    max_invalid: str | None = None  # the error threshold, canonical (core.threshold)
    notify_url: str | None = None  # the completion webhook (None: the client's default, if any)
    duplicates_report: bool = True  # compute and keep the duplicate report (core.duplicates)
    journaled: bool = True  # write the undo journal (Settings.undo_journal)


@dataclass(frozen=True, slots=True)
class JobView:
    """An import as the API shows it.

    ``counters`` are the chunk ledger's sums while the job runs and the job row's once it is
    terminal; ``rows_done`` is their ``rows_read`` and ``bytes_read`` the furthest offset a
    done chunk reached.
    """

    id: uuid.UUID
    client_id: int
    user_id: str | None
    status: JobStatus
    conflict_strategy: ConflictStrategy
    input_format: InputFormat
    source: str  # the storage key
    filename: str | None
    source_size: int | None
    source_sha256: str | None
    counters: Counters
    rows_done: int
    bytes_read: int
    bytes_total: int | None
    fail_reason: str | None
    cancel_requested: bool
    journey_id: int | None
    tags: tuple[str, ...] | None
    last_operation_id: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    warnings: tuple[JobWarning, ...] = ()  # file-level warnings (suspect_encoding)
    # What a watcher sees (importer/core/progress.py): any batch committed, the run's reader at the
    # end of the file, rows and bytes committed in the last RATE_WINDOW_S, the place of a queued
    # job in the claim's order (1: the next claim takes it).
    batches_done: bool = False
    read_to_end: bool = False
    recent_rows: int = 0
    recent_bytes: int = 0
    queue_position: int | None = None
    # Preview, then apply (see Job): the preview's document while it rests and after its apply.
    preview: dict[str, object] | None = None
    awaiting_apply: bool = False
    preview_expires_at: dt.datetime | None = None
    preview_applied: bool = False
    max_invalid: str | None = None
    validation: dict[str, object] | None = None
    duplicates_report: bool = True
    # Retention (issue 15): until when the import's source and undo journal are kept (its end +
    # IMPORTER_RETENTION_DAYS; None while it has not ended), and when they were purged.
    retained_until: dt.datetime | None = None
    purged_at: dt.datetime | None = None
    # The error report's cap (IMPORTER_MAX_ROW_ERRORS): the invalid rows and warnings counted
    # past it, not stored (the counters still count every row).
    row_errors_left_out: int = 0


@dataclass(frozen=True, slots=True)
class LeaseState:
    """What renewing a lease found: still ours, and whether a cancel was requested."""

    held: bool
    cancel_requested: bool


@dataclass(frozen=True, slots=True)
class Requeued:
    """A job the owner put back to ``queued``: its next run (1 was the first)."""

    job_id: uuid.UUID
    client_id: int
    run: int
    finalizations_removed: int  # the previous run's import_batch_finalized row (0 or 1)


@dataclass(frozen=True, slots=True)
class RemovedData:
    """What removing an import's data removed (all zero on a repeat)."""

    job_id: uuid.UUID
    client_id: int
    contacts: int  # soft-deleted (deleted_at set), with their channels
    details: int
    chunks: int  # ledger rows: a requeue then reads the whole file again
    row_errors: int
    removed_at: dt.datetime  # the first removal's time


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A chunk message in the dead-letter queue, as its owner sees it. ``job_id``, ``chunk``
    and ``partition`` are None when the body is not a chunk message (it went there for that)."""

    message_id: str | None
    job_id: uuid.UUID | None
    chunk: int | None
    partition: int | None
    error: str | None
    attempts: int  # failed deliveries, carried across re-publishes (T12)
    dead_lettered_at: str | None  # ISO 8601, UTC


@dataclass(frozen=True, slots=True)
class Finalized:
    """The terminal state written by the one finalization that won."""

    status: JobStatus
    counters: Counters


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """An outbox row: ``message_id`` is stable, so a re-publish carries the same id."""

    id: int
    message_id: str
    topic: str
    payload: bytes  # JSON


@dataclass(frozen=True, slots=True)
class StoredLayout:
    id: int
    name: str
    document: dict[str, object]
    created_at: dt.datetime
    updated_at: dt.datetime


@dataclass(frozen=True, slots=True)
class Limits:
    """Input limits; each protects memory or the database from a hostile file."""

    max_file_bytes: int = 20 * 1024**3
    max_decompressed_bytes: int = 40 * 1024**3
    # Past a few MiB of output, gzip expanding more than this many times is a bomb.
    max_gzip_ratio: int = 200
    max_record_chars: int = 1024 * 1024
    max_field_chars: int = 64 * 1024
    max_columns: int = 512
    max_value_chars: int = 4096


# --- fast constructors of the per-row values --------------------------------------------------
# Detail and ContactRow are frozen dataclasses: their __init__ sets each field through
# object.__setattr__, which looks the field up by name; for the three or four of them a row
# makes, that costs about as much as normalizing its key. The row builder and the chunk codec
# make them as __init__ does, minus the lookups: object.__new__, then each slot's own setter.
# slot_setters() checks that this is all __init__ does, so that a change to the models fails
# at import.
Setter = Callable[[object, object], None]


def slot_setters(cls: type, names: tuple[str, ...]) -> tuple[Setter, ...]:
    """The setters of a slotted dataclass's fields, which must be ``names`` in this order."""
    fields = tuple(f.name for f in dataclasses.fields(cls))
    slots = [vars(cls).get(name) for name in names]
    plain = all(isinstance(slot, MemberDescriptorType) for slot in slots)
    if fields != names or not plain or hasattr(cls, "__post_init__"):
        raise RuntimeError(f"{cls.__name__} is not the plain dataclass its fast constructor makes")
    return tuple(slot.__set__ for slot in slots if isinstance(slot, MemberDescriptorType))


_new = object.__new__
_DETAIL_SETTERS = slot_setters(Detail, ("channel", "value", "country_code", "country"))
_ROW_SETTERS = slot_setters(
    ContactRow, ("line", "cpf_cnpj", "name", "street_address", "details", "custom_fields")
)


def new_detail(
    channel: Channel, value: str, country_code: int | None = None, country: str | None = None
) -> Detail:
    """``Detail(channel, value, country_code, country)``, twice as fast."""
    detail: Detail = _new(Detail)
    set_channel, set_value, set_country_code, set_country = _DETAIL_SETTERS
    set_channel(detail, channel)
    set_value(detail, value)
    set_country_code(detail, country_code)
    set_country(detail, country)
    return detail


def new_contact_row(
    line: int,
    cpf_cnpj: str,
    name: str | None,
    street_address: str | None,
    details: tuple[Detail, ...],
    custom_fields: tuple[tuple[str, str], ...],
) -> ContactRow:
    """``ContactRow(...)`` with every field given, twice as fast."""
    row: ContactRow = _new(ContactRow)
    set_line, set_key, set_name, set_address, set_details, set_custom = _ROW_SETTERS
    set_line(row, line)
    set_key(row, cpf_cnpj)
    set_name(row, name)
    set_address(row, street_address)
    set_details(row, details)
    set_custom(row, custom_fields)
    return row


@dataclass(frozen=True, slots=True)
class RetentionDue:
    """An ended import whose personal data is due for its purge (``Settings.retention_days``)."""

    job_id: uuid.UUID
    source: str  # the upload's object key (a command line's file or URL is not ours to delete)
    local_path: str | None


@dataclass(frozen=True, slots=True)
class Purged:
    """What one purge removed: the job (0 when another sweep came first), raw report values,
    undo journal rows, chunk ledger and lane rows."""

    jobs: int
    raw_values: int
    journal_rows: int
    ledger_rows: int = 0
