"""Catalog T30: the lease is a live worker's, however slow. A worker stalls 6 s in one chunk (3x
its 2 s lease) while a second worker waits for work: the second never claims the job (the
heartbeat keeps the lease), and the job ends as an undisturbed import. (The dead worker's job
being reclaimed is test_crash_resume.py and test_faults.py.)"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.acceptance.conftest import Contacts
from tests.acceptance.test_crash_resume import (
    DEADLINE_S,
    _assert_invariants,
    _events,
    _is_terminal,
    _log_tail,
    _logged,
    _queued_job,
    _worker,
)
from tests.jobs_support import WAIT_S, eventually, job_env

pytestmark = [pytest.mark.acceptance, pytest.mark.exclusive]  # 2 s leases, 6 s stalls: timing


async def test_a_live_slow_worker_keeps_its_job_and_no_second_runner_starts(
    db_dsn: str, tmp_path: Path, contacts: Contacts
) -> None:
    slow_log, rescuer_log = tmp_path / "slow.log", tmp_path / "rescuer.log"
    async with job_env(db_dsn, tmp_path) as env:
        job_id = await _queued_job(env, contacts)
        slow = await _worker(env, slow_log, failpoints="chunk:3=sleep:6000")
        rescuer = None
        try:
            await eventually(lambda: _logged(slow_log, "job_claimed"))
            rescuer = await _worker(env, rescuer_log)
            await eventually(lambda: _logged(rescuer_log, "worker_started"))

            async def finished() -> bool | None:
                return True if await _is_terminal(env, job_id) else None

            await eventually(finished, timeout_s=DEADLINE_S)
        finally:
            workers = [w for w in (slow, rescuer) if w is not None]
            for worker in workers:
                worker.send_signal(signal.SIGTERM)
            codes = [await asyncio.wait_for(w.wait(), WAIT_S) for w in workers]
    assert codes == [0, 0], (_log_tail(slow_log), _log_tail(rescuer_log))
    assert not [e for e in _events(rescuer_log) if e["event"] == "job_claimed"]
    stalled = [e for e in _events(slow_log) if e["event"] == "chunk_applied" and e["chunk"] == 3]
    assert stalled  # the stall happened inside the live worker's run
    await _assert_invariants(db_dsn, job_id, contacts)
