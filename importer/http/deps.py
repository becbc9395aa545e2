"""What the routes depend on: the lifespan's :class:`Resources` and the FastAPI dependencies.

The lifespan (:mod:`importer.http.app`) puts one :class:`Resources` on ``app.state``; the
dependencies here hand its parts to the routes: the verified caller, the service, the owner's
operations, and the typed path parameters.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Path, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from importer.adapters.postgres.catalog import CatalogStore
from importer.core.errors import RateLimitedError
from importer.core.options import MAX_INT8
from importer.core.principals import Principal
from importer.http.auth import TokenVerifier, parse_bearer
from importer.metrics import ApiMetrics
from importer.ports import ClientWebhooks, ObjectStore, Resolver
from importer.services.admin import AdminService
from importer.services.columns import ColumnService
from importer.services.imports import ImportService
from importer.services.relay import OutboxRelay
from importer.services.supervisor import Supervisor
from importer.settings import Settings

if TYPE_CHECKING:
    from importer.adapters.redis import RedisAccelerator


@dataclass(slots=True)
class Resources:
    """What the lifespan created, for the routes (``request.app.state.resources``)."""

    settings: Settings
    service: ImportService
    verifier: TokenVerifier
    catalog: CatalogStore
    objects: ObjectStore
    workers: Supervisor
    metrics: ApiMetrics
    relay: OutboxRelay | None = None  # with a broker (RABBITMQ_URL) only
    accelerator: RedisAccelerator | None = None  # with Redis (REDIS_URL) only
    admin: AdminService | None = None  # the owner's operations
    client_webhooks: ClientWebhooks | None = None  # the clients' webhook settings
    resolver: Resolver | None = None  # a webhook target's addresses, checked
    columns: ColumnService | None = None  # the columns step
    draining: asyncio.Event = field(default_factory=asyncio.Event)

    def drain(self) -> None:
        self.draining.set()
        self.workers.drain()


def resources_of(request: Request) -> Resources:
    resources: Resources = request.app.state.resources
    return resources


async def _service(request: Request) -> ImportService:
    # async: FastAPI runs a plain-def dependency in its thread pool, a thread hop per request.
    return resources_of(request).service


_bearer = HTTPBearer(
    auto_error=False,
    description="A JWT with sub (user), client_id (tenant) and permissions.",
)


async def _caller(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> Principal:
    """The verified caller; the declared scheme documents it, our parser decides."""
    token = parse_bearer(request.headers.get("authorization"))
    return resources_of(request).verifier.verify(token)


async def _creator(
    request: Request, principal: Annotated[Principal, Depends(_caller)]
) -> Principal:
    """The caller of a route that creates an import, within its client's rate limit (with
    Redis only; it fails open: Redis down or slow lets the request through)."""
    accelerator = resources_of(request).accelerator
    if accelerator is not None:
        decision = await accelerator.limiter.admit(principal.client_id)
        if not decision.allowed:
            raise RateLimitedError(decision.retry_after_s)
    return principal


async def _admin_service(request: Request) -> AdminService:
    admin = resources_of(request).admin
    assert admin is not None
    return admin


Caller = Annotated[Principal, Depends(_caller)]
Creator = Annotated[Principal, Depends(_creator)]
Service = Annotated[ImportService, Depends(_service)]
Admin = Annotated[AdminService, Depends(_admin_service)]
JobId = Annotated[uuid.UUID, Path(description="the import's id")]
LayoutId = Annotated[int, Path(ge=1, le=MAX_INT8, description="the layout's id")]
