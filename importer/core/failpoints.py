"""Failpoints: named places where a test makes this process crash, fail or stall on purpose.

Configured once at start-up by the edge from ``Settings.failpoints`` (``IMPORTER_FAILPOINTS``)::

    IMPORTER_FAILPOINTS="after_commit=crash@3,before_finalize=sleep:500,chunk:7=error"

Each entry is ``name=action[@n]``:

* ``crash`` — ``os._exit(137)`` at once, as ``kill -9`` would end the process: no ``finally``,
  no flush, no lease release, no rollback but the database's own;
* ``error`` — raise :class:`InjectedFailureError`, a :class:`TransientStoreError`: the point
  then follows the path a dropped database connection takes (a batch is retried, then
  discarded; a worker's job is left for its lease to expire), which is the recovery worth
  provoking — a new kind of error would only test code written for it;
* ``sleep:<ms>`` — pause this task (the event loop keeps running).

Without ``@n`` the action fires at every hit; with it, at the n-th hit only (``crash@3``: after
two batches passed the point). Unset, :data:`armed` is None and each point costs one module
attribute test (``if failpoints.armed is not None``): nothing else runs on the hot path.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from importer.core.errors import ConfigurationError, TransientStoreError

ENV_VAR = "IMPORTER_FAILPOINTS"
# The exit status of ``crash``: the shell's status of a process killed by SIGKILL (128 + 9).
CRASH_EXIT_CODE = 137

# The points, where they stand.
AFTER_CLAIM = "after_claim"  # a worker claimed a job, before running it
AFTER_COPY_BEFORE_COMMIT = "after_copy_before_commit"  # a batch's rows written, not its ledger
AFTER_COMMIT = "after_commit"  # a batch committed, its counters not yet added in memory
BEFORE_FINALIZE = "before_finalize"  # before the finalization's transaction
AFTER_FINALIZE_BEFORE_RETURN = "after_finalize_before_return"  # finalization committed
BEFORE_DEAD_LETTER = "before_dead_letter"  # a batch given up and recorded, its copy not yet sent
UNDO_SLICE_BEFORE_COMMIT = "undo_slice_before_commit"  # an undo's slice written, not committed
UNDO_AFTER_SLICE = "undo_after_slice"  # an undo's slice committed, the next not begun
# One batch's chunk: ``chunk:<n>`` is reached as chunk n's batch (each of its partitions, each
# piece) begins its transaction — a poison chunk (``chunk:7=error``) or a slow one.
CHUNK_PREFIX = "chunk:"
POINTS = frozenset(
    {
        AFTER_CLAIM,
        AFTER_COPY_BEFORE_COMMIT,
        AFTER_COMMIT,
        BEFORE_FINALIZE,
        AFTER_FINALIZE_BEFORE_RETURN,
        BEFORE_DEAD_LETTER,
        UNDO_SLICE_BEFORE_COMMIT,
        UNDO_AFTER_SLICE,
    }
)


class InjectedFailureError(TransientStoreError):
    """A failpoint injected this failure."""


class Action(Enum):
    CRASH = "crash"
    ERROR = "error"
    SLEEP = "sleep"


@dataclass(slots=True)
class Failpoint:
    """One configured point: its action, the hit it fires on (None: every hit), its hits."""

    name: str
    action: Action
    sleep_s: float = 0.0
    fire_on: int | None = None
    hits: int = 0

    def fires(self) -> bool:
        """Count a hit; whether the action fires on it."""
        self.hits += 1
        return self.fire_on is None or self.hits == self.fire_on


class Failpoints:
    """The configured points of this process, by name."""

    def __init__(self, points: Mapping[str, Failpoint]) -> None:
        self._points = dict(points)

    def hits(self, name: str) -> int:
        point = self._points.get(name)
        return 0 if point is None else point.hits

    async def reach(self, name: str) -> None:
        """The code reached point ``name``: crash, fail or sleep if it is configured to."""
        point = self._points.get(name)
        if point is None or not point.fires():
            return
        if point.action is Action.CRASH:
            os.write(sys.stderr.fileno(), f"failpoint {name}: crash\n".encode())
            os._exit(CRASH_EXIT_CODE)
        if point.action is Action.ERROR:
            raise InjectedFailureError(f"failpoint {name}: injected error")
        await asyncio.sleep(point.sleep_s)


# The process's failpoints; None (the default) disarms every point at the cost of this test.
armed: Failpoints | None = None


def parse(spec: str) -> dict[str, Failpoint]:
    """``name=action[@n],…`` → the points; a bad spec raises ConfigurationError naming the
    variable."""
    points: dict[str, Failpoint] = {}
    for entry in (e.strip() for e in spec.split(",")):
        if not entry:
            continue
        point = _parse_entry(entry)
        if point.name in points:
            raise _bad(entry, f"{point.name} is given twice")
        points[point.name] = point
    return points


def _parse_entry(entry: str) -> Failpoint:
    name, sep, action_spec = (part.strip() for part in entry.partition("="))
    if not sep or not action_spec:
        raise _bad(entry, "expected name=action")
    if name not in POINTS and not _is_chunk_point(name):
        known = ", ".join([*sorted(POINTS), f"{CHUNK_PREFIX}<n>"])
        raise _bad(entry, f"unknown point {name!r} (known: {known})")
    action_spec, at, count = action_spec.partition("@")
    fire_on = _positive(entry, count, "the count after @") if at else None
    kind, colon, arg = action_spec.partition(":")
    if kind == Action.SLEEP.value and colon:
        sleep_ms = _positive(entry, arg, "sleep's milliseconds")
        return Failpoint(name, Action.SLEEP, sleep_s=sleep_ms / 1000, fire_on=fire_on)
    if kind in (Action.CRASH.value, Action.ERROR.value) and not colon:
        return Failpoint(name, Action(kind), fire_on=fire_on)
    raise _bad(entry, "the action must be crash, error or sleep:<ms>")


def chunk_point(chunk_no: int) -> str:
    return f"{CHUNK_PREFIX}{chunk_no}"


def _is_chunk_point(name: str) -> bool:
    number = name.removeprefix(CHUNK_PREFIX)
    return name.startswith(CHUNK_PREFIX) and number.isascii() and number.isdigit()


def _positive(entry: str, raw: str, what: str) -> int:
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise _bad(entry, f"{what} must be a whole number of at least 1, got {raw!r}")
    return int(raw)


def _bad(entry: str, problem: str) -> ConfigurationError:
    return ConfigurationError(f"{ENV_VAR}: {problem} in {entry!r}")


def configure(spec: str) -> None:
    """Arm the points ``spec`` names (disarm all when it names none); once, at start-up."""
    global armed  # noqa: PLW0603 (the one process-wide registry, set once by the edge)
    points = parse(spec)
    armed = Failpoints(points) if points else None
