"""The owner's operations (seed 001's runbook), shared by the API and the command line:
requeue an ended import, remove an import's data, look at and replay the dead-letter queue.

Over HTTP the caller is a :class:`Principal` holding ``IMPORT.ADMIN`` and everything is scoped
to its client (another client's job is a 404, another client's dead letter is not shown). On the
command line the operator has no token (``principal`` None): it acts on DATABASE_URL and
RABBITMQ_URL directly, on any client's jobs.

Requeue and finalization, exactly once: a requeue moves the job to ``queued`` as its next run
(``run_generation`` + 1) and deletes the previous run's ``import_batch_finalized`` row in the
same statement; the next finalization then inserts it again, once (its guarded update leaves the
running statuses once per run), and writes outbox rows whose ids carry the run
(``notification:<job>:<run>``): each finalization has exactly one notification, and the outbox's
UNIQUE message id would refuse a second.
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from importer.core.errors import ConfigurationError, NoBrokerError
from importer.core.models import (
    TERMINAL_STATUSES,
    DeadLetter,
    JobStatus,
    JobView,
    RemovedData,
    Requeued,
)
from importer.core.principals import Permission, Principal
from importer.ports import AdminStore, DeadLetterQueue, JobReader, Store, UndoStore
from importer.services.documents import job_document
from importer.services.undo import UndoOutcome, undo_import

# Dead letters one look (or replay) takes from the queue at most: they are held unacknowledged
# until it ends, so the bound keeps a deep queue from being held whole.
MAX_SCAN = 1000


DEFAULT_LIST_LIMIT = 20


MAX_LIST_LIMIT = 100


@dataclass(frozen=True, slots=True)
class HistoryFilter:
    """``importer history``'s options: every filter optional, newest first."""

    client_id: int | None = None
    user_id: str | None = None
    statuses: tuple[JobStatus, ...] = ()
    limit: int = DEFAULT_LIST_LIMIT


async def job_status(jobs: JobReader, job_id: uuid.UUID, now: dt.datetime) -> dict[str, object]:
    """``importer status JOB``: the API's status document of any client's job."""
    return owner_job_document(await jobs.view_job(None, job_id), now)


async def job_history(
    jobs: JobReader, wanted: HistoryFilter, now: dt.datetime
) -> dict[str, object]:
    """``importer history``: the API's history items, newest first; ``more`` when cut short."""
    views = await jobs.list_jobs(
        wanted.client_id,
        user_id=wanted.user_id,
        statuses=wanted.statuses or None,
        before=None,
        limit=wanted.limit + 1,
    )
    items = [owner_job_document(view, now) for view in views[: wanted.limit]]
    return {"items": items, "more": len(views) > wanted.limit}


def owner_job_document(view: JobView, now: dt.datetime) -> dict[str, object]:
    """The API's document of the job (the same builder: CLI and API agree), and its client:
    the owner's commands see every client's jobs."""
    return {"id": str(view.id), "client_id": view.client_id, **job_document(view, now)}


class Verdict(enum.StrEnum):
    """What a replay does with a dead letter."""

    REPLAY = "replayed"  # its import still runs: back to the main queue
    JOB_ENDED = "job_ended"  # left in the queue: requeue the import, it re-reads the chunk
    UNKNOWN_IMPORT = "unknown_import"  # no such import (for this client): left
    MALFORMED = "malformed"  # not a chunk message: left for inspection
    NOT_ASKED = "not_asked"  # another import than the one asked for: left


def replay_verdict(
    letter: DeadLetter, status: JobStatus | None, only_job: uuid.UUID | None
) -> Verdict:
    """Whether to replay ``letter``, whose import is in ``status`` (None: not found).

    Only a running import takes chunks: a chunk of an ended one would be dropped as late by the
    consumer, so it stays in the queue, and the way to its rows is a requeue of the import.
    """
    if letter.job_id is None:
        return Verdict.MALFORMED
    if only_job is not None and letter.job_id != only_job:
        return Verdict.NOT_ASKED
    if status is None:
        return Verdict.UNKNOWN_IMPORT
    if status in TERMINAL_STATUSES:
        return Verdict.JOB_ENDED
    return Verdict.REPLAY


@dataclass(frozen=True, slots=True)
class ListedLetter:
    letter: DeadLetter
    client_id: int | None  # None: no import of that id (or not a chunk message)
    job_status: JobStatus | None


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    items: list[ListedLetter]
    scanned: int  # messages looked at (every client's)
    more: bool  # more of the caller's may lie past the page or the scan bound


@dataclass(frozen=True, slots=True)
class Skipped:
    letter: DeadLetter
    verdict: Verdict


@dataclass(frozen=True, slots=True)
class ReplayOutcome:
    replayed: list[DeadLetter]
    skipped: list[Skipped]
    scanned: int


class AdminService:
    """The owner's operations; ``principal`` None is the command line's operator."""

    def __init__(
        self,
        store: AdminStore,
        dead_letters: DeadLetterQueue | None,
        undo: tuple[UndoStore, Store] | None = None,
    ) -> None:
        self._store = store
        self._dead_letters = dead_letters
        self._undo = undo  # the undo's store and the client turns' (the pipeline's Store)

    async def undo(self, principal: Principal | None, job_id: uuid.UUID) -> UndoOutcome:
        """Take an ended import back (issue 15): see :func:`importer.services.undo.undo_import`."""
        if self._undo is None:
            raise ConfigurationError("undo is not wired here")
        undo, turns = self._undo
        return await undo_import(undo, turns, _scope(principal), job_id)

    async def requeue(
        self, principal: Principal | None, job_id: uuid.UUID, operation_id: str | None = None
    ) -> Requeued:
        client_id = _scope(principal)
        operation = operation_id or f"requeue:{uuid.uuid4()}"
        return await self._store.requeue_job(client_id, job_id, operation)

    async def remove_data(self, principal: Principal | None, job_id: uuid.UUID) -> RemovedData:
        return await self._store.remove_job_data(_scope(principal), job_id)

    async def dead_letters(self, principal: Principal | None, limit: int) -> DeadLetterPage:
        """The caller's dead letters, oldest first, without consuming them."""
        client_id = _scope(principal)
        queue = self._queue()
        async with queue.browse(MAX_SCAN) as held:
            letters = [h.letter for h in held]
            statuses = await self._statuses(client_id, letters)
        visible = [
            ListedLetter(letter, *_found(statuses, letter))
            for letter in letters
            if client_id is None or letter.job_id in statuses
        ]
        more = len(visible) > limit or len(letters) >= MAX_SCAN
        return DeadLetterPage(visible[:limit], len(letters), more)

    async def replay(
        self, principal: Principal | None, only_job: uuid.UUID | None = None
    ) -> ReplayOutcome:
        """Replay the caller's dead letters whose import still runs; report the others."""
        client_id = _scope(principal)
        replayed: list[DeadLetter] = []
        skipped: list[Skipped] = []
        async with self._queue().browse(MAX_SCAN) as held:
            statuses = await self._statuses(client_id, [h.letter for h in held])
            for letter in held:
                owner, status = _found(statuses, letter.letter)
                if client_id is not None and owner is None:
                    continue  # another client's, or nobody's: not the caller's to see
                verdict = replay_verdict(letter.letter, status, only_job)
                if verdict is Verdict.REPLAY:
                    await letter.replay()
                    replayed.append(letter.letter)
                elif verdict is not Verdict.NOT_ASKED:
                    skipped.append(Skipped(letter.letter, verdict))
        return ReplayOutcome(replayed, skipped, len(held))

    def _queue(self) -> DeadLetterQueue:
        if self._dead_letters is None:
            raise NoBrokerError()
        return self._dead_letters

    async def _statuses(
        self, client_id: int | None, letters: Sequence[DeadLetter]
    ) -> Mapping[uuid.UUID, tuple[int, JobStatus]]:
        job_ids = sorted({letter.job_id for letter in letters if letter.job_id is not None})
        if not job_ids:
            return {}
        return await self._store.job_statuses(client_id, job_ids)


def _found(
    statuses: Mapping[uuid.UUID, tuple[int, JobStatus]], letter: DeadLetter
) -> tuple[int | None, JobStatus | None]:
    """(client, status) of the letter's import; (None, None) when there is none."""
    if letter.job_id is None or letter.job_id not in statuses:
        return None, None
    return statuses[letter.job_id]


def _scope(principal: Principal | None) -> int | None:
    """The client the operation is limited to: the caller's, who must be an admin; None for
    the command line's operator."""
    if principal is None:
        return None
    principal.require(Permission.IMPORT_ADMIN)
    return principal.client_id


def requeued_document(requeued: Requeued) -> dict[str, object]:
    return {
        "job_id": str(requeued.job_id),
        "status": JobStatus.QUEUED.value,
        "run": requeued.run,
        "finalizations_removed": requeued.finalizations_removed,
    }


def undone_document(outcome: UndoOutcome) -> dict[str, object]:
    return {
        "job_id": str(outcome.job_id),
        "status": JobStatus.UNDONE.value,
        "slices": outcome.slices,
        "seconds": outcome.seconds,
    }


def removed_document(removed: RemovedData) -> dict[str, object]:
    return {
        "job_id": str(removed.job_id),
        "contacts": removed.contacts,
        "details": removed.details,
        "chunks": removed.chunks,
        "row_errors": removed.row_errors,
        "removed_at": removed.removed_at.isoformat(),
    }


def letter_document(letter: DeadLetter) -> dict[str, object]:
    return {
        "message_id": letter.message_id,
        "job_id": None if letter.job_id is None else str(letter.job_id),
        "chunk": letter.chunk,
        "partition": letter.partition,
        "error": letter.error,
        "attempts": letter.attempts,
        "dead_lettered_at": letter.dead_lettered_at,
    }


def page_document(page: DeadLetterPage) -> dict[str, object]:
    items = [
        {
            **letter_document(item.letter),
            "job_status": None if item.job_status is None else item.job_status.value,
        }
        for item in page.items
    ]
    return {"items": items, "scanned": page.scanned, "more": page.more}


def replay_document(outcome: ReplayOutcome) -> dict[str, object]:
    skipped = [{**letter_document(s.letter), "reason": s.verdict.value} for s in outcome.skipped]
    return {
        "replayed": len(outcome.replayed),
        "replayed_ids": [letter.message_id for letter in outcome.replayed],
        "skipped": skipped,
        "scanned": outcome.scanned,
    }
