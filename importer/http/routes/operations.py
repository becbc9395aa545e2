"""Routes of the ``operations`` tag: liveness, readiness (with its probes), Prometheus metrics."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from importer.core.errors import ImporterError, ObjectNotFoundError
from importer.http import openapi as doc
from importer.http.bodies import json_response
from importer.http.deps import resources_of
from importer.ports import ObjectStore

log = structlog.get_logger(__name__)

# The storage probe of /readyz looks up this key: "not found" means the store answers.
READY_PROBE_KEY = "readyz/probe"
READY_PROBE_TIMEOUT_S = 5.0
# Redis is an accelerator: readiness reports it (`degraded` when away) but never fails on it.
OPTIONAL_CHECKS = frozenset({"redis"})
REDIS_PROBE_TIMEOUT_S = 0.5

router = APIRouter()


@router.get("/healthz", tags=["operations"], summary="The process is alive")
async def healthz() -> Response:
    return json_response({"status": "ok"})


@router.get(
    "/readyz",
    tags=["operations"],
    summary="The database and the object store answer; workers run; not draining",
    responses={503: {"model": doc.ErrorBody}},
)
async def readyz(request: Request) -> Response:
    resources = resources_of(request)
    checks = {
        "database": await _probe(resources.catalog.ping()),
        "storage": await _probe(_storage_probe(resources.objects)),
        "workers": "ok" if resources.workers.healthy else "stopped",
    }
    if resources.draining.is_set():
        checks["server"] = "draining"
    if resources.accelerator is not None:  # optional: reported, never failing readiness
        checks["redis"] = await _probe(resources.accelerator.ping(), REDIS_PROBE_TIMEOUT_S)
    failing = sorted(
        name for name, state in checks.items() if state != "ok" and name not in OPTIONAL_CHECKS
    )
    if failing:
        message = "not ready: " + ", ".join(f"{name} {checks[name]}" for name in failing)
        return json_response({"error": "not_ready", "message": message, "checks": checks}, 503)
    degraded = any(checks.get(name, "ok") != "ok" for name in OPTIONAL_CHECKS)
    return json_response({"status": "degraded" if degraded else "ready", "checks": checks})


async def _storage_probe(objects: ObjectStore) -> None:
    with contextlib.suppress(ObjectNotFoundError):
        await objects.stat(READY_PROBE_KEY)


async def _probe(check: Awaitable[None], timeout_s: float = READY_PROBE_TIMEOUT_S) -> str:
    try:
        await asyncio.wait_for(check, timeout_s)
    except (ImporterError, TimeoutError, OSError) as exc:
        log.warning("readiness_probe_failed", error=repr(exc))
        return "unavailable"
    return "ok"


@router.get("/metrics", tags=["operations"], summary="Prometheus metrics (text format)")
async def metrics(request: Request) -> Response:
    body = resources_of(request).metrics.exposition()
    return Response(body, media_type=CONTENT_TYPE_LATEST)
