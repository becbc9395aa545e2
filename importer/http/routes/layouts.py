"""Routes of the ``layouts`` tag: the tenant's stored layouts (the CLI's ``--layout`` document)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from importer.core.models import StoredLayout
from importer.http import openapi as doc
from importer.http.bodies import json_object, json_response
from importer.http.deps import Caller, LayoutId, Service

router = APIRouter()


def layout_document(layout: StoredLayout) -> dict[str, object]:
    return {
        "id": layout.id,
        "name": layout.name,
        "document": layout.document,
        "created_at": layout.created_at.isoformat(),
        "updated_at": layout.updated_at.isoformat(),
    }


_LAYOUT_BODY = doc.request_body({"application/json": doc.LayoutBody})


@router.post(
    "/v1/layouts",
    status_code=201,
    tags=["layouts"],
    summary="Store a layout (the CLI's --layout document)",
    openapi_extra=_LAYOUT_BODY,
    responses={201: {"model": doc.LayoutOut}, **doc.error_responses()},
)
async def create_layout(request: Request, principal: Caller, service: Service) -> Response:
    layout = await service.create_layout(principal, await json_object(request))
    return json_response(layout_document(layout), 201)


@router.get(
    "/v1/layouts",
    tags=["layouts"],
    summary="The tenant's layouts",
    responses={200: {"model": doc.LayoutListBody}, **doc.error_responses()},
)
async def list_layouts(principal: Caller, service: Service) -> Response:
    layouts = await service.list_layouts(principal)
    return json_response({"items": [layout_document(layout) for layout in layouts]})


@router.get(
    "/v1/layouts/{layout_id}",
    tags=["layouts"],
    summary="One layout",
    responses={200: {"model": doc.LayoutOut}, **doc.error_responses(404)},
)
async def get_layout(layout_id: LayoutId, principal: Caller, service: Service) -> Response:
    return json_response(layout_document(await service.get_layout(principal, layout_id)))


@router.put(
    "/v1/layouts/{layout_id}",
    tags=["layouts"],
    summary="Replace a layout",
    openapi_extra=_LAYOUT_BODY,
    responses={200: {"model": doc.LayoutOut}, **doc.error_responses(404)},
)
async def update_layout(
    layout_id: LayoutId, request: Request, principal: Caller, service: Service
) -> Response:
    layout = await service.update_layout(principal, layout_id, await json_object(request))
    return json_response(layout_document(layout))


@router.delete(
    "/v1/layouts/{layout_id}",
    status_code=204,
    tags=["layouts"],
    summary="Delete a layout (jobs keep the copy they were created with)",
    responses=doc.error_responses(404),
)
async def delete_layout(layout_id: LayoutId, principal: Caller, service: Service) -> Response:
    await service.delete_layout(principal, layout_id)
    return Response(status_code=204)
