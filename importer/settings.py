"""Settings built once from an injected environment mapping (12-factor)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from importer.core import failpoints
from importer.core.config import (
    DEFAULT_LOCK_TIMEOUT_MS,
    DEFAULT_MAX_ROW_ERRORS,
    DEFAULT_OUTBOX_RETENTION_DAYS,
    DEFAULT_RETENTION_DAYS,
    DEFAULT_WEBHOOK_RETENTION_DAYS,
    MAX_CHUNK_SIZE,
)
from importer.core.errors import ConfigurationError
from importer.core.models import Limits
from importer.core.webhooks import RetryPolicy

# DATABASE_URL unset: the embedded PostgreSQL (importer[embedded]) with its data here.
DEFAULT_DATA_DIR = "./var/postgres"


# Rows per chunk: large enough that per-transaction round trips are noise next to the rows' work.
DEFAULT_CHUNK_SIZE = 5000


# Consumers (and key partitions) per import: enough to keep both cores of the database busy.
DEFAULT_CONCURRENCY = 4


# Bytes read from the source per block.
DEFAULT_READ_BLOCK = 256 * 1024


# Chunks buffered between the reader and each consumer: bounds memory whatever the file size.
DEFAULT_QUEUE_DEPTH = 2


# Where uploaded files live when no S3 endpoint is configured.
DEFAULT_STORAGE_DIR = "./var/objects"


DEFAULT_BUCKET = "importer"


# A worker's (or the CLI's) lease on a job: renewed every third of it; a dead worker's job is
# reclaimed after it, a dead CLI import is abandoned (resumable).
DEFAULT_PREVIEW_TTL_SECONDS = 24 * 3600.0
DEFAULT_LEASE_SECONDS = 30.0


# Imports one client may run at once across all workers: one tenant cannot take every worker.
DEFAULT_MAX_IMPORTS_PER_CLIENT = 2


# An idle worker looks at the queue this often even without a notification.
DEFAULT_WORKER_POLL_SECONDS = 5.0


# Largest file an HTTP upload may carry (multipart or PUT); larger bodies get 413 unread.
DEFAULT_MAX_UPLOAD_BYTES = 5 * 1024**3


# The server's own address, for the upload URL it hands out when storage has no presigned PUT.
DEFAULT_PUBLIC_URL = "http://127.0.0.1:8000"


# How long a failed chunk waits in the broker's retry queue before it is delivered again.
DEFAULT_RETRY_DELAY_MS = 30_000


# Retries of a failed chunk before it is discarded and its message dead-lettered.
DEFAULT_MAX_RETRIES = 3


# Imports one client may create per minute through the API (enforced only with REDIS_URL set).
DEFAULT_RATE_LIMIT_PER_MINUTE = 120


# Completion webhooks: attempts of one delivery, and how long after its event it may still be
# tried (whichever bound comes first); the first retry's wait (doubling, at most an hour); one
# attempt's whole time.
DEFAULT_WEBHOOK_MAX_ATTEMPTS = 8
DEFAULT_WEBHOOK_MAX_AGE_S = 24 * 3600.0
DEFAULT_WEBHOOK_RETRY_DELAY_S = 30.0
DEFAULT_WEBHOOK_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Settings:
    # Empty until resolved: DATABASE_URL, or the embedded server's socket URL (the CLI's edge
    # starts it in data_dir when DATABASE_URL is unset; see ``embedded``).
    database_url: str = ""
    data_dir: str = DEFAULT_DATA_DIR
    chunk_size: int = DEFAULT_CHUNK_SIZE
    concurrency: int = DEFAULT_CONCURRENCY
    read_block_bytes: int = DEFAULT_READ_BLOCK
    queue_depth: int = DEFAULT_QUEUE_DEPTH
    max_batch_attempts: int = 4
    log_format: str = "console"
    log_level: str | None = None  # None: the command's own (see `log_level_for`)
    limits: Limits = Limits()
    # Object storage: S3 when an endpoint is set, else a local directory.
    s3_endpoint_url: str | None = None
    bucket: str = DEFAULT_BUCKET
    aws_region: str | None = None
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = None
    storage_dir: str = DEFAULT_STORAGE_DIR
    # Bearer tokens: HS256 with a shared secret, or RS256 with a PEM public key.
    jwt_secret: str | None = None
    jwt_public_key: str | None = None
    # When set, a token must name this audience (``aud``) / issuer (``iss``); else 401.
    jwt_audience: str | None = None
    jwt_issuer: str | None = None
    # Workers (`importer worker`, `importer serve`); lease_seconds also the CLI's imports.
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    # How long a statement waits for a lock (then the batch is retried, then discarded).
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
    # The compiled hot path (Cython) when it is built; IMPORTER_PURE=1 runs the pure reference.
    compiled: bool = True
    max_imports_per_client: int = DEFAULT_MAX_IMPORTS_PER_CLIENT
    worker_poll_seconds: float = DEFAULT_WORKER_POLL_SECONDS
    # A preview waits this long for its apply, then expires `cancelled` (IMPORTER_PREVIEW_TTL_S).
    preview_ttl_seconds: float = DEFAULT_PREVIEW_TTL_SECONDS
    # Retention (LGPD): an ended import's source, raw report values and undo journal are purged
    # this many days after its end (IMPORTER_RETENTION_DAYS); its undo then answers 410.
    retention_days: int = DEFAULT_RETENTION_DAYS
    # Bounded tables (issue 26): published outbox messages and ended webhook deliveries (with
    # their attempts) are deleted this many days after they ended; an import's error report
    # stores at most max_row_errors rows and counts the rest.
    outbox_retention_days: int = DEFAULT_OUTBOX_RETENTION_DAYS
    webhook_retention_days: int = DEFAULT_WEBHOOK_RETENTION_DAYS
    max_row_errors: int = DEFAULT_MAX_ROW_ERRORS
    # Each batch journals what it changes, for undo (IMPORTER_UNDO_JOURNAL=0: no journal, no undo).
    undo_journal: bool = True
    # HTTP API (`importer serve`).
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    workers_per_process: int = 1
    public_url: str = DEFAULT_PUBLIC_URL
    # RabbitMQ: None runs one instance without a broker (retries in-process, no outbox relay).
    rabbitmq_url: str | None = None
    retry_delay_ms: int = DEFAULT_RETRY_DELAY_MS
    # Put before every queue name: instances (or tests) with different prefixes share nothing.
    queue_prefix: str = ""
    lane_wait_ms: int = 1_000  # a deferred chunk's wait for its lane (multi-instance mode)
    max_retries: int = DEFAULT_MAX_RETRIES
    # Redis: an accelerator only (progress hints, the creation rate limit); None runs without.
    redis_url: str | None = None
    rate_limit_per_minute: int = DEFAULT_RATE_LIMIT_PER_MINUTE
    # Completion webhooks (a create's notify_url): the bound, the backoff, the attempt's time;
    # allow_private accepts http and private, loopback or link-local targets (tests, on-prem).
    webhook_max_attempts: int = DEFAULT_WEBHOOK_MAX_ATTEMPTS
    webhook_max_age_s: float = DEFAULT_WEBHOOK_MAX_AGE_S
    webhook_retry_delay_s: float = DEFAULT_WEBHOOK_RETRY_DELAY_S
    webhook_timeout_s: float = DEFAULT_WEBHOOK_TIMEOUT_S
    webhook_allow_private: bool = False
    # Tests only: `name=action[@n],…` (importer.core.failpoints); empty arms none.
    failpoints: str = ""

    @property
    def embedded(self) -> bool:
        """No DATABASE_URL: the importer's own PostgreSQL in ``data_dir``."""
        return not self.database_url

    @property
    def webhook_policy(self) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=self.webhook_max_attempts,
            max_age_s=self.webhook_max_age_s,
            first_delay_s=self.webhook_retry_delay_s,
        )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        """Read ``DATABASE_URL`` and the ``IMPORTER_*`` variables; unset ones keep their default."""
        d = _DEFAULT_LIMITS
        limits = Limits(
            max_file_bytes=_int(environ, "IMPORTER_MAX_FILE_BYTES", d.max_file_bytes),
            max_decompressed_bytes=_int(
                environ, "IMPORTER_MAX_DECOMPRESSED_BYTES", d.max_decompressed_bytes
            ),
            max_gzip_ratio=_int(environ, "IMPORTER_MAX_GZIP_RATIO", d.max_gzip_ratio),
            max_record_chars=_int(environ, "IMPORTER_MAX_RECORD_CHARS", d.max_record_chars),
            max_field_chars=_int(environ, "IMPORTER_MAX_FIELD_CHARS", d.max_field_chars),
            max_columns=_int(environ, "IMPORTER_MAX_COLUMNS", d.max_columns),
            max_value_chars=_int(environ, "IMPORTER_MAX_VALUE_CHARS", d.max_value_chars),
        )
        return cls(
            database_url=environ.get("DATABASE_URL") or "",
            data_dir=environ.get("IMPORTER_DATA_DIR") or DEFAULT_DATA_DIR,
            chunk_size=_chunk_size(environ),
            concurrency=_int(environ, "IMPORTER_CONCURRENCY", DEFAULT_CONCURRENCY),
            queue_depth=_int(environ, "IMPORTER_QUEUE_DEPTH", DEFAULT_QUEUE_DEPTH),
            log_format=environ.get("IMPORTER_LOG_FORMAT", "console"),
            log_level=environ.get("IMPORTER_LOG_LEVEL") or None,
            limits=limits,
            s3_endpoint_url=environ.get("S3_ENDPOINT_URL") or None,
            bucket=environ.get("IMPORTER_BUCKET") or DEFAULT_BUCKET,
            aws_region=environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or None,
            aws_access_key_id=environ.get("AWS_ACCESS_KEY_ID") or None,
            aws_secret_access_key=environ.get("AWS_SECRET_ACCESS_KEY") or None,
            storage_dir=environ.get("IMPORTER_STORAGE_DIR") or DEFAULT_STORAGE_DIR,
            jwt_secret=environ.get("JWT_SECRET") or None,
            jwt_public_key=environ.get("JWT_PUBLIC_KEY") or None,
            jwt_audience=environ.get("JWT_AUDIENCE") or None,
            jwt_issuer=environ.get("JWT_ISSUER") or None,
            lease_seconds=_seconds(environ, "IMPORTER_LEASE_SECONDS", DEFAULT_LEASE_SECONDS),
            lock_timeout_ms=_int(environ, "IMPORTER_LOCK_TIMEOUT_MS", DEFAULT_LOCK_TIMEOUT_MS),
            preview_ttl_seconds=_seconds(
                environ, "IMPORTER_PREVIEW_TTL_S", DEFAULT_PREVIEW_TTL_SECONDS
            ),
            retention_days=_int(environ, "IMPORTER_RETENTION_DAYS", DEFAULT_RETENTION_DAYS),
            outbox_retention_days=_int(
                environ, "IMPORTER_OUTBOX_RETENTION_DAYS", DEFAULT_OUTBOX_RETENTION_DAYS
            ),
            webhook_retention_days=_int(
                environ, "IMPORTER_WEBHOOK_RETENTION_DAYS", DEFAULT_WEBHOOK_RETENTION_DAYS
            ),
            max_row_errors=_int(environ, "IMPORTER_MAX_ROW_ERRORS", DEFAULT_MAX_ROW_ERRORS),
            undo_journal=_flag(environ, "IMPORTER_UNDO_JOURNAL") is not False,
            max_imports_per_client=_int(
                environ, "IMPORTER_MAX_IMPORTS_PER_CLIENT", DEFAULT_MAX_IMPORTS_PER_CLIENT
            ),
            max_upload_bytes=_int(environ, "IMPORTER_MAX_UPLOAD_BYTES", DEFAULT_MAX_UPLOAD_BYTES),
            workers_per_process=_int(environ, "IMPORTER_WORKERS", 1),
            public_url=(environ.get("IMPORTER_PUBLIC_URL") or DEFAULT_PUBLIC_URL).rstrip("/"),
            rabbitmq_url=environ.get("RABBITMQ_URL") or None,
            retry_delay_ms=_int(environ, "IMPORTER_RETRY_DELAY_MS", DEFAULT_RETRY_DELAY_MS),
            queue_prefix=environ.get("IMPORTER_QUEUE_PREFIX", ""),
            lane_wait_ms=_int(environ, "IMPORTER_LANE_WAIT_MS", 1_000),
            max_retries=_int(environ, "IMPORTER_MAX_RETRIES", DEFAULT_MAX_RETRIES),
            redis_url=environ.get("REDIS_URL") or None,
            rate_limit_per_minute=_int(
                environ, "IMPORTER_RATE_LIMIT_PER_MINUTE", DEFAULT_RATE_LIMIT_PER_MINUTE
            ),
            webhook_max_attempts=_int(
                environ, "IMPORTER_WEBHOOK_MAX_ATTEMPTS", DEFAULT_WEBHOOK_MAX_ATTEMPTS
            ),
            webhook_max_age_s=_seconds(
                environ, "IMPORTER_WEBHOOK_MAX_AGE_S", DEFAULT_WEBHOOK_MAX_AGE_S
            ),
            webhook_retry_delay_s=_seconds(
                environ, "IMPORTER_WEBHOOK_RETRY_DELAY_S", DEFAULT_WEBHOOK_RETRY_DELAY_S
            ),
            webhook_timeout_s=_seconds(
                environ, "IMPORTER_WEBHOOK_TIMEOUT_S", DEFAULT_WEBHOOK_TIMEOUT_S
            ),
            webhook_allow_private=_flag(environ, "IMPORTER_WEBHOOK_ALLOW_PRIVATE") is True,
            failpoints=_failpoints(environ),
            compiled=_flag(environ, "IMPORTER_PURE") is not True,
        )


_DEFAULT_LIMITS = Limits()


# The long-running services log their canonical lines (`chunk_applied`, `job_finished`) by
# default; the command line keeps quiet (its bar and summary say it all).
SERVICE_COMMANDS = frozenset({"serve", "worker"})


SERVICE_LOG_LEVEL = "info"


CLI_LOG_LEVEL = "warning"


def log_level_for(command: str, configured: str | None) -> str:
    """IMPORTER_LOG_LEVEL when set; else ``info`` for serve and worker, ``warning`` otherwise."""
    if configured:
        return configured
    return SERVICE_LOG_LEVEL if command in SERVICE_COMMANDS else CLI_LOG_LEVEL


def _chunk_size(environ: Mapping[str, str]) -> int:
    value = _int(environ, "IMPORTER_CHUNK_SIZE", DEFAULT_CHUNK_SIZE)
    if value > MAX_CHUNK_SIZE:
        raise ConfigurationError(
            f"IMPORTER_CHUNK_SIZE must be at most {MAX_CHUNK_SIZE}, got {value}"
        )
    return value


def _int(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from exc
    if value < 1:
        raise ConfigurationError(f"{name} must be at least 1, got {value}")
    return value


def _flag(environ: Mapping[str, str], name: str) -> bool | None:
    """A yes/no variable: ``1``/``true``/``yes`` or ``0``/``false``/``no``; unset or empty: None."""
    raw = environ.get(name, "").strip().lower()
    if not raw:
        return None
    if raw in {"1", "true", "yes"}:
        return True
    if raw in {"0", "false", "no"}:
        return False
    raise ConfigurationError(f"{name} must be 1 or 0 (true/false, yes/no), not {raw!r}")


def _failpoints(environ: Mapping[str, str]) -> str:
    """The failpoint spec, checked now: a typo is a start-up error, not a silent no-op."""
    spec = environ.get(failpoints.ENV_VAR, "")
    failpoints.parse(spec)
    return spec


def _seconds(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name} must be a number of seconds, got {raw!r}") from exc
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{name} must be more than 0 seconds, got {raw!r}")
    return value
