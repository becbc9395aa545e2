"""Routes of the ``admin`` tag: the owner's operations (IMPORT.ADMIN; seed 001's runbook) —
requeue an ended import, remove its data, peek at and replay dead letters; the client's
completion webhook settings."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from importer.core.principals import Permission
from importer.http import openapi as doc
from importer.http.bodies import json_object, json_response, operation_id
from importer.http.deps import Admin, Caller, JobId, Service, resources_of
from importer.services.admin import (
    DEFAULT_LIST_LIMIT,
    MAX_LIST_LIMIT,
    page_document,
    removed_document,
    replay_document,
)
from importer.services.documents import job_document
from importer.services.webhooks import (
    parse_webhook_settings,
    set_client_webhook,
    webhook_document,
)

router = APIRouter()


@router.post(
    "/v1/imports/{job_id}/requeue",
    status_code=202,
    tags=["admin"],
    summary="Requeue an ended import (IMPORT.ADMIN): its next run resumes from the ledger",
    description=(
        "A `failed` or `cancelled` import, or an abandoned one (running, its lease expired), "
        "goes back to `queued` with its file and sealed checksum; the next run skips the chunks "
        "its ledger holds. A completed import only after DELETE /v1/imports/{job_id}/data (409 "
        "import_already_applied before); a running one (live lease): 409 illegal_transition. "
        "Each run finalizes (and notifies) exactly once."
    ),
    responses={202: {"model": doc.RequeuedBody}, **doc.error_responses(404, 409)},
)
async def requeue_import(
    job_id: JobId, request: Request, principal: Caller, service: Service, admin: Admin
) -> Response:
    requeued = await admin.requeue(principal, job_id, operation_id(request, {}))
    view = await service.view(principal, job_id)
    document = {"job": job_document(view, service.clock()), "run": requeued.run}
    return json_response(document, 202)


@router.post(
    "/v1/imports/{job_id}/undo",
    tags=["admin"],
    summary="Undo an ended import (IMPORT.ADMIN): the contacts back as they were before it",
    description=(
        "From the import's journal, in one transaction per bounded slice: the contacts it "
        "created soft-deleted with their channels, the values it overwrote restored, the "
        "channels it added and its unused new custom fields removed; the job ends `undone` "
        "(its finalization row and an `import_undone` notification record it), and may be "
        "requeued. 409 undo_conflict (with the first 100 contacts and the imports that changed "
        "them since; none: another writer) when something it would restore changed since: "
        "undo the later imports first, newest first. An import that fed a journey loses the "
        "links it made and its classification ends CANCELED; 409 journey_started when the "
        "classification is ACTIVE, DONE or EXPIRED (nothing undone: pause it first). A step "
        "that fails ends the job `failed` (`undo_failed: …`, 409 undo_failed); asked again, "
        "the undo resumes where it stopped, as one that stopped half-way (`undoing`) does; "
        "a repeat of a finished one changes nothing."
    ),
    responses={200: {"model": doc.UndoneBody}, **doc.error_responses(404, 409)},
)
async def undo_import(job_id: JobId, principal: Caller, service: Service, admin: Admin) -> Response:
    outcome = await admin.undo(principal, job_id)
    view = await service.view(principal, job_id)
    return json_response({"job": job_document(view, service.clock()), "slices": outcome.slices})


@router.delete(
    "/v1/imports/{job_id}/data",
    tags=["admin"],
    summary="Remove an ended import's data (IMPORT.ADMIN; idempotent)",
    description=(
        "Soft-deletes the contacts the import created (with their channels) and clears its "
        "ledger and per-row report, in one transaction; a repeat removes nothing more. Then "
        "POST /v1/imports/{job_id}/requeue imports the stored file again. 409 while it runs."
    ),
    responses={200: {"model": doc.RemovedDataBody}, **doc.error_responses(404, 409)},
)
async def remove_import_data(
    job_id: JobId, principal: Caller, service: Service, admin: Admin
) -> Response:
    removed = await admin.remove_data(principal, job_id)
    view = await service.view(principal, job_id)
    counts = removed_document(removed)
    del counts["job_id"]
    return json_response({"job": job_document(view, service.clock()), "removed": counts})


@router.get(
    "/v1/admin/dead-letters",
    tags=["admin"],
    summary="The client's dead-lettered chunk messages, oldest first (IMPORT.ADMIN)",
    description=(
        "A bounded peek: messages are taken unacknowledged and handed back, none is consumed. "
        "Multi-instance mode only: without RABBITMQ_URL, 409 no_broker."
    ),
    responses={200: {"model": doc.DeadLetterListBody}, **doc.error_responses(409)},
)
async def list_dead_letters(
    principal: Caller,
    admin: Admin,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = DEFAULT_LIST_LIMIT,
) -> Response:
    return json_response(page_document(await admin.dead_letters(principal, limit)))


@router.post(
    "/v1/admin/dead-letters/replay",
    tags=["admin"],
    summary="Replay the client's dead letters of running imports (IMPORT.ADMIN)",
    description=(
        "Each is republished to the main queue (confirmed, its attempt count carried on), then "
        "removed from the dead-letter queue. A letter of an ended import stays (skipped, "
        "job_ended): requeue the import instead. Without RABBITMQ_URL, 409 no_broker."
    ),
    responses={200: {"model": doc.ReplayBody}, **doc.error_responses(409)},
)
async def replay_dead_letters(
    principal: Caller,
    admin: Admin,
    job_id: Annotated[uuid.UUID | None, Query(description="only this import's")] = None,
) -> Response:
    return json_response(replay_document(await admin.replay(principal, job_id)))


@router.get(
    "/v1/admin/webhook",
    tags=["admin"],
    summary="The client's completion webhook settings (IMPORT.ADMIN)",
    description="Its default notify_url and whether a signing secret is set (never the secret).",
    responses={200: {"model": doc.WebhookBody}, **doc.error_responses()},
)
async def get_webhook(request: Request, principal: Caller) -> Response:
    principal.require(Permission.IMPORT_ADMIN)
    store = resources_of(request).client_webhooks
    assert store is not None
    webhook = await store.get(principal.client_id)
    return json_response(webhook_document(webhook, principal.client_id))


@router.put(
    "/v1/admin/webhook",
    tags=["admin"],
    summary="Set the client's webhook secret and default notify_url (IMPORT.ADMIN)",
    description=(
        "The secret signs every delivery (X-Importer-Signature); a create's notify_url needs "
        "it. Answers the settings with the secret, for the receiver. notify_url is checked like "
        "a create's: https, every address public (400 on notify_url)."
    ),
    openapi_extra=doc.request_body({"application/json": doc.WebhookSettingsBody}),
    responses={200: {"model": doc.WebhookSecretBody}, **doc.error_responses()},
)
async def put_webhook(request: Request, principal: Caller) -> Response:
    principal.require(Permission.IMPORT_ADMIN)
    asked = parse_webhook_settings(await json_object(request))
    resources = resources_of(request)
    assert resources.client_webhooks is not None
    assert resources.resolver is not None
    webhook = await set_client_webhook(
        resources.client_webhooks,
        resources.resolver,
        resources.settings,
        principal.client_id,
        notify_url=asked.notify_url,
        secret=asked.secret,
        new_secret=asked.new_secret,
    )
    document = {
        "client_id": webhook.client_id,
        "notify_url": webhook.notify_url,
        "secret": webhook.secret,
    }
    return json_response(document)
