"""Prometheus metrics of the HTTP API and of the import pipeline, in a registry owned by one app
or one worker process (no global state).

A pure ASGI middleware counts every request by method, route template and status, and times it;
the route is the template (``/v1/imports/{job_id}``), never the raw path, so the series stay
few whatever the ids. :class:`PipelineMetrics` is the pipeline's observer: it is called once per
block, batch or job, never per row, and its labelled series are bound once, up front.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from importer.core.models import TERMINAL_STATUSES, Counters, JobStatus
from importer.core.webhooks import Outcome

# Request latency buckets (seconds): from a cached read to a multi-second upload.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)
# Batch apply buckets (seconds): a small batch commits in milliseconds, a contended one in seconds.
_BATCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Job buckets (seconds): from a one-row file to a run of several hours.
_JOB_BUCKETS = (0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0)
UNMATCHED = "unmatched"
OUTCOMES = ("inserted", "updated", "invalid", "error", "ignored")
# What became of a batch (or of a piece of a split one).
CHUNK_RESULTS = ("applied", "repeated", "split", "rejected_row", "discarded")


class ApiMetrics:
    """The series the API exports, all prefixed ``importer_``; its workers' pipeline series
    (:attr:`pipeline`) share the registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.pipeline = PipelineMetrics(self.registry)
        self.requests = Counter(
            "importer_http_requests",
            "HTTP requests by method, route template and status.",
            ("method", "route", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "importer_http_request_duration_seconds",
            "Time to answer an HTTP request (streams: until the last byte).",
            ("method", "route"),
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.imports_created = Counter(
            "importer_imports_created",
            "Imports created through the API, by how the file arrived.",
            ("source",),
            registry=self.registry,
        )
        self.upload_bytes = Counter(
            "importer_upload_bytes",
            "Bytes of files received by this server (multipart and PUT uploads).",
            registry=self.registry,
        )
        self.workers = Gauge(
            "importer_workers_running",
            "Job workers running in this process.",
            registry=self.registry,
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


class MetricsMiddleware:
    """Counts and times every HTTP request (pure ASGI: streaming responses pass untouched)."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = route_template(scope)
            method = str(scope.get("method", ""))
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.latency.labels(method, route).observe(time.perf_counter() - started)


_RETAINED = ("jobs", "objects", "raw_values", "journal_rows")


class PipelineMetrics:
    """The import pipeline's series: a :class:`~importer.ports.PipelineObserver`.

    ``importer worker`` serves no HTTP: there the series are collected in its own registry.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        rows = Counter(
            "importer_rows",
            "Rows of committed batches by outcome (the jobs' counters, summed).",
            ("outcome",),
            registry=self.registry,
        )
        self._rows = {outcome: rows.labels(outcome) for outcome in OUTCOMES}
        self.rows_read = Counter(
            "importer_rows_read",
            "Records the readers parsed (header excluded; a resumed run reads its skipped"
            " records again).",
            registry=self.registry,
        )
        self.bytes_read = Counter(
            "importer_bytes_read",
            "Bytes the readers read from import sources (before decompression).",
            registry=self.registry,
        )
        phase_rows = Counter(
            "importer_phase_rows",
            "Rows through each phase: read (records the readers parsed) and apply (rows of"
            " committed batches, rejected and discarded rows included); rate() of it is the"
            " rows/s of each phase.",
            ("phase",),
            registry=self.registry,
        )
        self._read_rows = phase_rows.labels("read")
        self._applied_rows = phase_rows.labels("apply")
        chunks = Counter(
            "importer_chunks",
            "Batches (one chunk's rows of one key partition, or a piece of a split one) by"
            " result: applied, repeated (the ledger had it: a no-op), split, rejected_row"
            " (a poison row alone), discarded (given up after its retries).",
            ("result",),
            registry=self.registry,
        )
        self._chunks = {result: chunks.labels(result) for result in CHUNK_RESULTS}
        self.retries = Counter(
            "importer_batch_retries",
            "Batch applies retried after a transient database failure.",
            registry=self.registry,
        )
        self.dead_letters = Counter(
            "importer_dead_letters",
            "Batches given up after all retries (their valid rows count as error).",
            registry=self.registry,
        )
        self.batch_duration = Histogram(
            "importer_batch_duration_seconds",
            "Time to commit a batch, retries included.",
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "importer_queue_depth",
            "Batches waiting in the pipelines' in-process queues (all running imports).",
            registry=self.registry,
        )
        jobs = Counter(
            "importer_jobs",
            "Jobs this process ran to a terminal status, by that status.",
            ("status",),
            registry=self.registry,
        )
        self._jobs = {
            status: jobs.labels(status.value) for status in (*TERMINAL_STATUSES, JobStatus.READY)
        }
        self.job_duration = Histogram(
            "importer_job_duration_seconds",
            "Time of a job's last run in this process, claim to terminal status.",
            buckets=_JOB_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "importer_imports_in_flight",
            "Imports running in this process, by client (a client's series goes when its"
            " last import ends: the series stay as few as the clients importing).",
            ("client_id",),
            registry=self.registry,
        )
        self._running: dict[int, int] = {}  # client_id → imports running
        webhook_attempts = Counter(
            "importer_webhook_attempts",
            "Completion webhook attempts by outcome: delivered (a 2xx), retry (failed, tried"
            " again later), gave_up (failed, the delivery's bound reached).",
            ("outcome",),
            registry=self.registry,
        )
        self._webhook_attempts = {o: webhook_attempts.labels(o.value) for o in Outcome}
        retention = Counter(
            "importer_retention_purged",
            "What the retention sweeps purged (IMPORTER_RETENTION_DAYS): imports, stored files,"
            " raw report values, undo journal rows.",
            ("what",),
            registry=self.registry,
        )
        self._retention = {w: retention.labels(w) for w in _RETAINED}

    def webhook_attempt(self, outcome: Outcome, status_code: int | None) -> None:  # noqa: ARG002
        """The webhook delivery's observer: one call per attempt (the status is in its log)."""
        self._webhook_attempts[outcome].inc()

    def on_job_started(self, client_id: int) -> None:
        self._running[client_id] = self._running.get(client_id, 0) + 1
        self.in_flight.labels(str(client_id)).inc()

    def on_job_finished(self, client_id: int, status: JobStatus | None, seconds: float) -> None:
        running = self._running.get(client_id, 0) - 1
        if running > 0:
            self._running[client_id] = running
            self.in_flight.labels(str(client_id)).dec()
        elif running == 0:
            del self._running[client_id]
            self.in_flight.remove(str(client_id))
        if status is not None:
            self._jobs[status].inc()
            self.job_duration.observe(seconds)

    def on_bytes_read(self, count: int) -> None:
        self.bytes_read.inc(count)

    def on_records_read(self, count: int) -> None:
        if count:
            self.rows_read.inc(count)
            self._read_rows.inc(count)

    def on_queue_depth(self, change: int) -> None:
        self.queue_depth.inc(change)

    def on_batch_applied(self, counters: Counters, seconds: float, repeated: bool) -> None:
        self._chunks["repeated" if repeated else "applied"].inc()
        self.batch_duration.observe(seconds)
        self._count_rows(counters)

    def on_batch_retry(self) -> None:
        self.retries.inc()

    def on_batch_split(self) -> None:
        self._chunks["split"].inc()

    def on_retention(self, jobs: int, objects: int, raw_values: int, journal_rows: int) -> None:
        for what, count in zip(_RETAINED, (jobs, objects, raw_values, journal_rows), strict=True):
            self._retention[what].inc(count)

    def on_batch_discarded(self, counters: Counters, rejected: bool) -> None:
        if rejected:
            self._chunks["rejected_row"].inc()
        else:
            self._chunks["discarded"].inc()
            self.dead_letters.inc()
        self._count_rows(counters)

    def _count_rows(self, counters: Counters) -> None:
        rows = self._rows
        for outcome, count in (
            ("inserted", counters.inserted),
            ("updated", counters.updated),
            ("invalid", counters.invalid),
            ("error", counters.error),
            ("ignored", counters.ignored),
        ):
            if count:
                rows[outcome].inc(count)
        if counters.rows_read:
            self._applied_rows.inc(counters.rows_read)
