"""Prometheus metrics of the HTTP API, in a registry owned by one app (no global state).

A pure ASGI middleware counts every request by method, route template and status, and times it;
the route is the template (``/v1/imports/{job_id}``), never the raw path, so the series stay
few whatever the ids.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Request latency buckets (seconds): from a cached read to a multi-second upload.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)
UNMATCHED = "unmatched"


class ApiMetrics:
    """The series the API exports, all prefixed ``importer_``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
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
