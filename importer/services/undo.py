"""Undo an ended import (issue 15): its client's contacts back to exactly their state before it.

Under the client's import turn (no import of the client runs meanwhile): the decision and the
conflict check on the locked job (``UndoStore.begin_undo``: another writer changed what the
undo would restore → UndoConflictError, nothing undone), then slice after slice, each in its own
transaction, until the job is ``undone``. The undo holds the job's lease: a stopped undo is
left ``undoing`` with the rest of its journal, and undoing it again resumes there; one whose
process died is failed by the workers' sweep once its lease expires (issue 25). A step that
fails (a constraint the platform added, a deadlock) ends the job ``failed`` with the reason
(``undo_failed: …``, UndoFailedError): the owner undoes it again once the cause is gone.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

import structlog

from importer.core import lifecycle
from importer.core.errors import ImporterError, LeaseLostError, StoreError, UndoFailedError
from importer.ports import Store, UndoStore

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class UndoOutcome:
    job_id: uuid.UUID
    slices: int  # the slices this call ran (0: undone already)
    seconds: float


async def undo_import(
    undo: UndoStore,
    turns: Store,
    client_id: int | None,
    job_id: uuid.UUID,
    stop: asyncio.Event | None = None,
) -> UndoOutcome:
    """Undo ``job_id`` (``client_id`` None: the owner's command line, any client's job)."""
    started = time.perf_counter()
    client = await undo.undo_client(client_id, job_id)
    async with turns.client_turn(client, stop or asyncio.Event()) as turn:
        if not turn:
            raise ImporterError(f"import {job_id}: stopped while waiting for its client's turn")
        start = await undo.begin_undo(client_id, job_id)
        slices = 0
        if start.action is lifecycle.UndoAction.RUN:
            slices = await _run_slices(undo, job_id)
    seconds = round(time.perf_counter() - started, 3)
    log.info("import_undone", job_id=str(job_id), client_id=client, slices=slices, s=seconds)
    return UndoOutcome(job_id, slices, seconds)


async def _run_slices(undo: UndoStore, job_id: uuid.UUID) -> int:
    """The undo's slices to its end; a failed one fails the job with its reason."""
    slices = 0
    try:
        while await undo.undo_slice(job_id):
            slices += 1
    except LeaseLostError:
        raise  # another undo owns it now, or the sweep failed it: write nothing more
    except StoreError as exc:
        reason = lifecycle.undo_failure_reason(str(exc))
        await undo.fail_undo(job_id, reason)
        log.exception("undo_failed", job_id=str(job_id), slices=slices, reason=reason)
        raise UndoFailedError(f"import {job_id}: {reason}") from exc
    return slices
