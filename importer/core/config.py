"""The configuration of one run of the pipeline (limits, layout, block size, queues, retries)."""

from __future__ import annotations

from dataclasses import dataclass

from importer.core.layout import Layout
from importer.core.models import (
    Limits,
)

# A statement waiting longer than this for a lock fails (the batch is retried, then discarded).
DEFAULT_LOCK_TIMEOUT_MS = 30_000

# The largest chunk: a chunk message carries at most this many rows (core/codec.py), and a
# batch's rows, plans and COPY payload stay in memory together.
MAX_CHUNK_SIZE = 1_000_000


# LGPD: an ended import's personal data is kept this long (IMPORTER_RETENTION_DAYS).
DEFAULT_RETENTION_DAYS = 30


# The error report's rows one import stores at most (IMPORTER_MAX_ROW_ERRORS); past it they are
# counted, not stored: a wrong 50M-row file keeps this many, and says how many it left out.
DEFAULT_MAX_ROW_ERRORS = 100_000


# Published outbox messages are kept this long (IMPORTER_OUTBOX_RETENTION_DAYS).
DEFAULT_OUTBOX_RETENTION_DAYS = 7


# Ended webhook deliveries and their attempts are kept this long (IMPORTER_WEBHOOK_RETENTION_DAYS).
DEFAULT_WEBHOOK_RETENTION_DAYS = 30


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    limits: Limits
    layout: Layout | None = None
    international: bool = False
    read_block_bytes: int = 256 * 1024
    queue_depth: int = 2
    max_batch_attempts: int = 4
    # Multi-instance imports: chunks published ahead of the slowest lane (bounds the broker).
    publish_window: int = 8
    lane_poll_s: float = 0.05  # how often the coordinator looks at its lanes while it waits
    # The compiled hot path where it is built (IMPORTER_PURE=1: the pure reference everywhere).
    compiled: bool = True
    preview_ttl_s: float = 24 * 3600  # how long a preview waits for its apply
