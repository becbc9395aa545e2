"""The pure side of the Redis accelerator: hints, the rate-limit decision, outages, the
observer that forwards to the metrics and offers hints."""

from __future__ import annotations

import uuid

import pytest
import structlog

from importer.core.accelerator import (
    ALLOWED,
    PROGRESS_CHANNEL_PREFIX,
    Outage,
    ProgressHint,
    RateDecision,
    decode_hint,
    encode_hint,
    job_of_channel,
    progress_channel,
    rate_decision,
    rate_key,
)
from importer.core.models import Counters, JobStatus
from importer.pipeline.observers import HintingObserver
from importer.settings import DEFAULT_RATE_LIMIT_PER_MINUTE, Settings

JOB = uuid.UUID("0b9f3c2e-54b6-4c1e-9d0f-6a1e2f3a4b5c")


# --- hints ------------------------------------------------------------------------------------


def test_a_hint_survives_its_encoding() -> None:
    hint = ProgressHint(JOB, "batch", 250)
    data = encode_hint(hint)
    assert len(data) < 100  # small: one per batch
    assert decode_hint(data) == hint
    assert decode_hint(data.decode()) == hint


@pytest.mark.parametrize(
    "data",
    [b"", b"not json", b"[]", b"{}", b'{"job_id": "x", "event": "batch"}', b'{"job_id": 3}'],
)
def test_anything_else_is_no_hint_rather_than_an_error(data: bytes) -> None:
    assert decode_hint(data) is None


def test_each_job_has_its_channel() -> None:
    channel = progress_channel(JOB)
    assert channel == f"importer:progress:{JOB}"
    assert job_of_channel(channel) == JOB
    assert job_of_channel(channel.encode()) == JOB
    assert job_of_channel(PROGRESS_CHANNEL_PREFIX + "nope") is None
    assert job_of_channel(f"other:{JOB}") is None


# --- the rate-limit decision ------------------------------------------------------------------


def test_creations_up_to_the_limit_are_allowed() -> None:
    assert rate_decision(1, 3, 120.0) == ALLOWED
    assert rate_decision(3, 3, 179.9) == ALLOWED


@pytest.mark.parametrize(
    ("now", "retry_after"), [(120.0, 60), (150.5, 30), (179.2, 1), (179.99, 1), (125.0, 55)]
)
def test_beyond_the_limit_the_answer_is_when_the_window_ends(now: float, retry_after: int) -> None:
    assert rate_decision(4, 3, now) == RateDecision(allowed=False, retry_after_s=retry_after)


def test_the_counter_is_per_client_and_per_minute() -> None:
    assert rate_key(7, 120.0) == rate_key(7, 179.9) == "importer:rate:7:2"
    assert rate_key(7, 180.0) != rate_key(7, 179.9)
    assert rate_key(8, 120.0) != rate_key(7, 120.0)


def test_redis_is_off_unless_configured() -> None:
    assert Settings.from_environ({}).redis_url is None
    assert Settings.from_environ({}).rate_limit_per_minute == DEFAULT_RATE_LIMIT_PER_MINUTE
    settings = Settings.from_environ(
        {"REDIS_URL": "redis://127.0.0.1:6390/0", "IMPORTER_RATE_LIMIT_PER_MINUTE": "5"}
    )
    assert (settings.redis_url, settings.rate_limit_per_minute) == ("redis://127.0.0.1:6390/0", 5)


# --- outages ----------------------------------------------------------------------------------


def test_an_outage_is_skipped_for_a_while_and_said_once_per_interval() -> None:
    now = [100.0]
    outage = Outage(cooldown_s=1.0, warn_every_s=30.0, clock=lambda: now[0])
    assert not outage.skipping()
    assert outage.failed()  # the first failure is logged
    assert outage.skipping()
    now[0] = 101.5
    assert not outage.skipping()  # tried again after the cool-down
    assert not outage.failed()  # but not logged again within 30 s
    now[0] = 131.0
    assert outage.failed()


# --- the observer -----------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> object:
        return lambda *args, **kwargs: self.calls.append(name)


def test_the_observer_forwards_everything_and_hints_what_changed_the_job() -> None:
    inner = Recorder()
    hints: list[ProgressHint] = []
    observer = HintingObserver(inner, hints.append)  # type: ignore[arg-type]
    counters = Counters(rows_read=10, inserted=10)
    with structlog.contextvars.bound_contextvars(job_id=str(JOB)):
        observer.on_job_started(1)
        observer.on_bytes_read(5)
        observer.on_records_read(10)
        observer.on_queue_depth(1)
        observer.on_batch_applied(counters, 0.1, repeated=False)
        observer.on_batch_applied(Counters(), 0.1, repeated=True)  # a no-op: nothing changed
        observer.on_batch_retry()
        observer.on_batch_split()
        observer.on_batch_discarded(Counters(rows_read=2, error=2), rejected=False)
        observer.on_job_finished(1, None, 1.0)  # left to a later run: no hint
        observer.on_job_finished(1, JobStatus.COMPLETED, 1.0)
    assert inner.calls == [
        "on_job_started",
        "on_bytes_read",
        "on_records_read",
        "on_queue_depth",
        "on_batch_applied",
        "on_batch_applied",
        "on_batch_retry",
        "on_batch_split",
        "on_batch_discarded",
        "on_job_finished",
        "on_job_finished",
    ]
    assert hints == [
        ProgressHint(JOB, "batch", 10),
        ProgressHint(JOB, "batch", 2),
        ProgressHint(JOB, "finished"),
    ]


def test_without_a_job_in_context_there_is_nothing_to_hint() -> None:
    hints: list[ProgressHint] = []
    observer = HintingObserver(Recorder(), hints.append)  # type: ignore[arg-type]
    observer.on_batch_applied(Counters(rows_read=1, inserted=1), 0.1, repeated=False)
    assert hints == []
