"""The pure side of the Redis accelerator: progress hints, the rate-limit decision, outages.

Redis only ever makes things faster (an SSE stream looks at its job when a batch commits rather
than at its next poll) or refuses a burst of creations; it never holds the truth. A hint says
"this job changed, look again": its content is advisory and never reaches a client, whose
counters always come from PostgreSQL. There are no locks in Redis: finalization happens once
because of a guarded ``UPDATE … WHERE status = ANY(…)`` and the ``import_batch_finalized``
primary key, so losing Redis (or a Redis that lies) can never allow a second finalization.

No driver here: ``importer/adapters/redis.py`` does the I/O with these values.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:  # ports name RateDecision: imported at run time, this would be a cycle
    pass


# Every hint of a job goes to its own channel; the API subscribes to the pattern.
PROGRESS_CHANNEL_PREFIX = "importer:progress:"


PROGRESS_PATTERN = PROGRESS_CHANNEL_PREFIX + "*"


# The creation rate limit counts in fixed windows of this many seconds.
RATE_WINDOW_S = 60


RATE_KEY_PREFIX = "importer:rate:"


@dataclass(frozen=True, slots=True)
class ProgressHint:
    """Something happened to a job: a batch committed (``rows`` of it) or the job ended here."""

    job_id: uuid.UUID
    event: str  # "batch" or "finished"
    rows: int = 0


def progress_channel(job_id: uuid.UUID) -> str:
    return f"{PROGRESS_CHANNEL_PREFIX}{job_id}"


def job_of_channel(channel: str | bytes) -> uuid.UUID | None:
    """The job a hint's channel names; None for anything else."""
    name = channel.decode("utf-8", "replace") if isinstance(channel, bytes) else channel
    if not name.startswith(PROGRESS_CHANNEL_PREFIX):
        return None
    try:
        return uuid.UUID(name.removeprefix(PROGRESS_CHANNEL_PREFIX))
    except ValueError:
        return None


def encode_hint(hint: ProgressHint) -> bytes:
    return orjson.dumps({"job_id": str(hint.job_id), "event": hint.event, "rows": hint.rows})


def decode_hint(data: bytes | str) -> ProgressHint | None:
    """The hint in ``data``; None when it is not one (a hint is advisory: never an error)."""
    try:
        document = orjson.loads(data)
        return ProgressHint(
            uuid.UUID(document["job_id"]), str(document["event"]), int(document.get("rows", 0))
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None


@dataclass(frozen=True, slots=True)
class RateDecision:
    allowed: bool
    retry_after_s: int = 0  # when refused: seconds until the window ends (at least 1)


ALLOWED = RateDecision(allowed=True)


def rate_key(client_id: int, now: float) -> str:
    """The counter of ``client_id`` 's creations in the window holding ``now`` (epoch seconds)."""
    return f"{RATE_KEY_PREFIX}{client_id}:{int(now // RATE_WINDOW_S)}"


def rate_decision(count: int, limit: int, now: float) -> RateDecision:
    """``count`` creations in the current window (this one included) against ``limit``."""
    if count <= limit:
        return ALLOWED
    window_end = (now // RATE_WINDOW_S + 1) * RATE_WINDOW_S
    return RateDecision(allowed=False, retry_after_s=max(1, math.ceil(window_end - now)))


class Outage:
    """Redis failing: skip it for ``cooldown_s`` after a failure, and say so at most once per
    ``warn_every_s`` (a dead accelerator must not cost each request a timeout, nor flood logs).
    """

    def __init__(
        self,
        cooldown_s: float,
        warn_every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cooldown_s = cooldown_s
        self._warn_every_s = warn_every_s
        self._clock = clock
        self._retry_at = -math.inf
        self._next_warning = -math.inf

    def skipping(self) -> bool:
        return self._clock() < self._retry_at

    def failed(self) -> bool:
        """Record a failure; True when it should be logged."""
        now = self._clock()
        self._retry_at = now + self._cooldown_s
        if now < self._next_warning:
            return False
        self._next_warning = now + self._warn_every_s
        return True
