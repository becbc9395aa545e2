"""The pipeline's observer: Prometheus series counted once per batch and per job, and the log
context (job_id, client_id, chunk, partition) bound through structlog's contextvars."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import structlog
from prometheus_client import generate_latest

from importer.core.config import PipelineConfig
from importer.core.errors import ContentRefusedError, StoreError, TransientStoreError
from importer.core.models import Batch, Counters, Job, JobStatus, Limits, NewJob
from importer.core.reference import InMemoryStore
from importer.metrics import ApiMetrics, PipelineMetrics
from importer.pipeline.run import ImportRun
from importer.ports import NullObserver, PipelineObserver
from tests.support import cpf

CONFIG = PipelineConfig(limits=Limits(), read_block_bytes=256)
POISON = "POISON"
CLIENT = 42


def value(metrics: PipelineMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_counts_from_a_few_batches() -> None:
    metrics = PipelineMetrics()
    metrics.on_records_read(13)
    metrics.on_bytes_read(4096)
    metrics.on_batch_applied(Counters(rows_read=5, inserted=3, updated=1, invalid=1), 0.02, False)
    metrics.on_batch_applied(Counters(rows_read=4, inserted=2, ignored=2), 0.5, False)
    metrics.on_batch_applied(Counters(), 0.001, repeated=True)
    metrics.on_batch_retry()
    metrics.on_batch_retry()
    metrics.on_batch_split()
    metrics.on_batch_discarded(Counters(rows_read=1, error=1), rejected=True)
    metrics.on_batch_discarded(Counters(rows_read=3, invalid=1, error=2), rejected=False)
    for change in (1, 1, 1, -2):
        metrics.on_queue_depth(change)

    rows = {o: value(metrics, "importer_rows_total", outcome=o) for o in ("inserted", "updated")}
    assert rows == {"inserted": 5.0, "updated": 1.0}
    assert value(metrics, "importer_rows_total", outcome="invalid") == 2.0
    assert value(metrics, "importer_rows_total", outcome="error") == 3.0
    assert value(metrics, "importer_rows_total", outcome="ignored") == 2.0
    assert value(metrics, "importer_rows_read_total") == 13.0
    assert value(metrics, "importer_bytes_read_total") == 4096.0
    assert value(metrics, "importer_phase_rows_total", phase="read") == 13.0
    assert value(metrics, "importer_phase_rows_total", phase="apply") == 13.0
    chunks = {
        result: value(metrics, "importer_chunks_total", result=result)
        for result in ("applied", "repeated", "split", "rejected_row", "discarded")
    }
    assert chunks == {
        "applied": 2.0,
        "repeated": 1.0,
        "split": 1.0,
        "rejected_row": 1.0,
        "discarded": 1.0,
    }
    assert value(metrics, "importer_batch_retries_total") == 2.0
    assert value(metrics, "importer_dead_letters_total") == 1.0
    assert value(metrics, "importer_batch_duration_seconds_count") == 3.0
    assert value(metrics, "importer_batch_duration_seconds_sum") == 0.521
    assert value(metrics, "importer_queue_depth") == 1.0


def test_jobs_by_terminal_status_and_in_flight_by_client() -> None:
    metrics = PipelineMetrics()
    assert value(metrics, "importer_jobs_total", status="completed") == 0.0  # zero, not absent
    metrics.on_job_started(7)
    metrics.on_job_started(7)
    metrics.on_job_started(8)
    assert value(metrics, "importer_imports_in_flight", client_id="7") == 2.0
    metrics.on_job_finished(7, JobStatus.COMPLETED, 3.0)
    assert value(metrics, "importer_imports_in_flight", client_id="7") == 1.0
    metrics.on_job_finished(7, None, 1.0)  # released at shutdown: not terminal, not timed
    assert value(metrics, "importer_imports_in_flight", client_id="7") is None  # series gone
    metrics.on_job_finished(8, JobStatus.FAILED, 2.0)
    metrics.on_job_finished(8, JobStatus.FAILED, 2.0)  # an unmatched end changes no gauge
    assert value(metrics, "importer_imports_in_flight", client_id="8") is None
    assert value(metrics, "importer_jobs_total", status="completed") == 1.0
    assert value(metrics, "importer_jobs_total", status="failed") == 2.0
    assert value(metrics, "importer_jobs_total", status="cancelled") == 0.0
    assert value(metrics, "importer_job_duration_seconds_count") == 3.0


def test_each_app_owns_its_registry_shared_by_api_and_pipeline() -> None:
    first, second = ApiMetrics(), ApiMetrics()  # no global registry: no duplicate series
    assert first.pipeline.registry is first.registry
    first.pipeline.on_batch_applied(Counters(rows_read=1, inserted=1), 0.01, repeated=False)
    text = first.exposition().decode()
    assert 'importer_rows_total{outcome="inserted"} 1.0' in text
    assert "# TYPE importer_imports_in_flight gauge" in text
    assert "importer_http_requests_total" in generate_latest(second.registry).decode()
    assert 'importer_rows_total{outcome="inserted"} 0.0' in second.exposition().decode()
    observers: list[PipelineObserver] = [first.pipeline, NullObserver()]  # the port (mypy)
    assert len(observers) == 2


# --- a real run on the in-memory store ---------------------------------------------------------


class BytesSource:
    def __init__(self, name: str, data: bytes) -> None:
        self.name = name
        self.data = data
        self.size: int | None = len(data)

    async def blocks(self, block_size: int) -> AsyncIterator[bytes]:
        for start in range(0, len(self.data), block_size):
            yield self.data[start : start + block_size]


class FlakyStore(InMemoryStore):
    """Refuses (as content) a batch holding a POISON row; fails the first ``transient`` applies
    as a lost connection, then the next ``broken`` ones for good."""

    def __init__(self, transient: int = 0, broken: int = 0) -> None:
        super().__init__()
        self.transient = transient
        self.broken = broken

    async def apply_batch(self, job: Job, batch: Batch, *, lane: bool = False) -> Counters | None:
        if self.transient:
            self.transient -= 1
            raise TransientStoreError("ConnectionDoesNotExistError: gone")
        if self.broken:
            self.broken -= 1
            raise StoreError("InsufficientPrivilegeError: permission denied")
        if any(r.name == POISON for r in batch.rows):
            raise ContentRefusedError('CheckViolationError: violates check constraint "poison"')
        return await super().apply_batch(job, batch, lane=lane)


def source(rows: int, poison: frozenset[int] = frozenset()) -> BytesSource:
    lines = ["nome,cpf"] + [
        f"{POISON if i in poison else f'N{i}'},{cpf(100 + i)}" for i in range(rows)
    ]
    lines.append("bad,123")  # an invalid row
    return BytesSource("m.csv", ("\n".join(lines) + "\n").encode())


async def run(
    store: InMemoryStore, data: BytesSource, observer: PipelineObserver, chunk: int = 5
) -> uuid.UUID:
    job_id = uuid.uuid4()
    new = NewJob(job_id, CLIENT, None, data.name, "csv", "merge", chunk, 2)
    await store.create_job(new, JobStatus.QUEUED)
    job = await store.get_job(job_id)
    finalized = await asyncio.wait_for(
        ImportRun(job, data, store, CONFIG, observer=observer).run(), 20
    )
    assert finalized is not None
    return job_id


async def test_a_run_with_a_retry_a_split_and_a_poison_row() -> None:
    metrics = PipelineMetrics()
    store = FlakyStore(transient=1)
    data = source(30, poison=frozenset({12}))
    job_id = await run(store, data, metrics)

    totals = store.finalized[job_id].counters
    assert (totals.rows_read, totals.inserted, totals.error, totals.invalid) == (31, 29, 1, 1)
    for outcome in ("inserted", "error", "invalid", "updated", "ignored"):
        assert value(metrics, "importer_rows_total", outcome=outcome) == getattr(totals, outcome)
    assert value(metrics, "importer_phase_rows_total", phase="read") == 31.0
    assert value(metrics, "importer_phase_rows_total", phase="apply") == 31.0
    assert value(metrics, "importer_rows_read_total") == 31.0
    assert value(metrics, "importer_bytes_read_total") == len(data.data)
    assert value(metrics, "importer_batch_retries_total") == 1.0
    assert value(metrics, "importer_chunks_total", result="rejected_row") == 1.0
    splits = value(metrics, "importer_chunks_total", result="split")
    assert splits is not None
    assert splits >= 1
    applied = value(metrics, "importer_chunks_total", result="applied")
    assert applied == len(store.ledger[job_id]) - 1  # every ledger row but the rejected piece
    assert value(metrics, "importer_batch_duration_seconds_count") == applied
    assert value(metrics, "importer_dead_letters_total") == 0.0
    assert value(metrics, "importer_queue_depth") == 0.0  # every queued batch was taken


async def test_a_batch_given_up_is_a_dead_letter() -> None:
    metrics = PipelineMetrics()
    store = FlakyStore(broken=1)
    job_id = await run(store, source(4), metrics, chunk=10)
    assert store.finalized[job_id].counters.error > 0
    assert value(metrics, "importer_chunks_total", result="discarded") == 1.0
    assert value(metrics, "importer_dead_letters_total") == 1.0
    assert (
        value(metrics, "importer_rows_total", outcome="error")
        == store.finalized[job_id].counters.error
    )


async def test_log_lines_inside_a_run_carry_the_job_and_leave_no_context_behind() -> None:
    store = FlakyStore(transient=1)
    with structlog.testing.capture_logs(
        processors=[structlog.contextvars.merge_contextvars]
    ) as logs:
        job_id = await run(store, source(12, poison=frozenset({3})), NullObserver())
    assert structlog.contextvars.get_contextvars() == {}  # nothing leaks into the caller
    inside = [e for e in logs if e["event"] in ("chunk_applied", "batch_retry", "row_rejected")]
    assert {e["event"] for e in inside} == {"chunk_applied", "batch_retry", "row_rejected"}
    for entry in inside:
        assert entry["job_id"] == str(job_id)
        assert entry["client_id"] == CLIENT
        assert isinstance(entry["chunk"], int)
        assert isinstance(entry["partition"], int)
    chunk_lines = [e for e in logs if e["event"] == "chunk_applied"]
    keys = {(e["chunk"], e["partition"], e.get("part", 1)) for e in chunk_lines}
    assert len(keys) == len(chunk_lines)  # one canonical line per batch (or piece)
