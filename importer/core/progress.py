"""What a person watching an import sees, the same everywhere (API, SSE, console, CLI bar): the
phase, rows per second over the last few seconds and the ETA. Pure: no I/O, no clock of its own.

Phases of a run (null when the job is not running: waiting, queued or ended):

* ``reading`` — the run reads the file and no batch of the job is committed yet;
* ``applying`` — batches are committed (the reader may still be reading);
* ``finalizing`` — the reader reached the end of the file: the batches still queued are
  applied, then the job is finalized.

The rates are over the last :data:`RATE_WINDOW_S` seconds (less while the run is younger): what
the ledger committed in that window for the API, what the batches reported for the CLI bar. The
ETA is the bytes left at the recent byte rate; unknown (None) without a total or a recent rate.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections import deque

RATE_WINDOW_S = 10.0


class Phase(enum.StrEnum):
    READING = "reading"
    APPLYING = "applying"
    FINALIZING = "finalizing"


def run_phase(*, running: bool, batches_done: bool, read_to_end: bool) -> Phase | None:
    """The phase of a run from what the database (or the CLI's run) knows of it."""
    if not running:
        return None
    if read_to_end:
        return Phase.FINALIZING
    if batches_done:
        return Phase.APPLYING
    return Phase.READING


def window_seconds(started_at: dt.datetime | None, now: dt.datetime) -> float | None:
    """The span the recent amounts cover: the window, or the run's age while it is younger."""
    if started_at is None:
        return None
    span = min(RATE_WINDOW_S, (now - started_at).total_seconds())
    return span if span > 0 else None


def per_second(amount: int, span_s: float | None) -> float | None:
    """``amount`` over ``span_s`` seconds, one decimal; None without a span."""
    if span_s is None or span_s <= 0:
        return None
    return round(max(amount, 0) / span_s, 1)


def eta_seconds(
    bytes_read: int, bytes_total: int | None, bytes_per_s: float | None
) -> float | None:
    """Seconds left for the bytes still to read at ``bytes_per_s``; None when unknown."""
    if bytes_total is None or not bytes_per_s or bytes_per_s <= 0:
        return None
    return round(max(bytes_total - bytes_read, 0) / bytes_per_s, 1)


def format_eta(seconds: float | None) -> str:
    """``1h 02m 03s``, ``2m 03s``, ``5s``; ``—`` when unknown (the console's formatEta)."""
    if seconds is None:
        return "—"
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


class RateWindow:
    """The CLI bar's recent rates from its per-batch (time, rows, bytes) samples.

    The oldest sample kept is the newest one at least a window old (the run's start at first),
    so the rates span the last window whatever the batches' pace.
    """

    def __init__(self, started: float) -> None:
        self._samples: deque[tuple[float, int, int]] = deque([(started, 0, 0)])

    def add(self, now: float, rows: int, bytes_read: int) -> None:
        self._samples.append((now, rows, bytes_read))
        while len(self._samples) > 1 and self._samples[1][0] <= now - RATE_WINDOW_S:
            self._samples.popleft()

    def rates(self, now: float) -> tuple[float, float]:
        """(rows/s, bytes/s) from the oldest sample kept to the last, over the time to now."""
        base_t, base_rows, base_bytes = self._samples[0]
        _, rows, bytes_read = self._samples[-1]
        span = max(now - base_t, 1e-6)
        return (rows - base_rows) / span, (bytes_read - base_bytes) / span
