"""Values the database cannot store are a 400 naming the field on every route, never a 5xx.

Regression of the schemathesis run (tests/api/test_schemathesis.py): a layout whose document held
U+0000 answered 503 ``database_unavailable`` (PostgreSQL's text and jsonb refuse NUL), and so did
NUL in a layout's name, an import's purpose, tags or inline layout, an intent's params, a start's
operation id and the history's ``user_id``. A document nested past orjson's 254 levels answered
500. Nothing of the refused requests is left behind: no job, no layout.
"""

from __future__ import annotations

import itertools
import json

import httpx
import pytest

from tests.api.support import ADMIN, CREATE, HSM, LGPD, auth, sha256, token, upload

pytestmark = pytest.mark.api

CONTENT = b"nome,cpf\nAna,52998224725\n"
ANNOUNCED = {
    "filename": "a.csv",
    "size": len(CONTENT),
    "sha256": sha256(CONTENT),
    "conflict_strategy": "merge",
    **LGPD,
}


def nested(depth: int) -> dict[str, object]:
    value: object = []
    for _ in range(depth - 2):
        value = [value]
    return {"a": value}


def assert_refused(response: httpx.Response, field: str, words: str = "NUL") -> None:
    assert response.status_code == 400, response.text
    problems = response.json()
    assert any(p["field"] == field and words in p["message"] for p in problems), problems


async def test_layouts_with_nul_or_too_deep_are_400(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = auth(token(next(client_ids)))
    for body, field, words in (
        ({"name": "x", "document": {"a": "b\x00"}}, "document", "NUL"),
        ({"name": "x", "document": {"a\x00": 1}}, "document", "NUL"),
        ({"name": "x\x00y", "document": {}}, "name", "NUL"),
        ({"name": "x", "document": nested(300)}, "document", "nest"),
    ):
        assert_refused(await http.post("/v1/layouts", json=body, headers=bearer), field, words)
    created = await http.post("/v1/layouts", json={"name": "x", "document": {}}, headers=bearer)
    assert created.status_code == 201, created.text
    replaced = await http.put(
        f"/v1/layouts/{created.json()['id']}",
        json={"name": "x", "document": {"a": "\x00"}},
        headers=bearer,
    )
    assert_refused(replaced, "document")
    listed = await http.get("/v1/layouts", headers=bearer)
    assert [layout["document"] for layout in listed.json()["items"]] == [{}]


async def test_import_options_with_nul_are_400_and_leave_no_job(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids))
    for change, field in (
        ({"data_processing_purpose": "m\x00"}, "data_processing_purpose"),
        ({"tags": ["a\x00"]}, "tags"),
        ({"layout": {"note": "\x00"}}, "layout"),
    ):
        response = await http.post(
            "/v1/uploads", json={**ANNOUNCED, **change}, headers=auth(bearer)
        )
        assert_refused(response, field)
    refused = await upload(http, bearer, CONTENT, data_processing_purpose="m\x00")
    assert_refused(refused, "data_processing_purpose")
    history = await http.get("/v1/imports", headers=auth(bearer))
    assert history.json()["items"] == []


async def test_intent_params_with_nul_or_too_deep_are_400(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = token(next(client_ids), permissions=(HSM,))
    for params, words in (({"a": "\x00"}, "NUL"), ({"\x00": 1}, "NUL"), (nested(300), "nest")):
        intent = json.dumps({"kind": "hsm", "params": params})  # orjson stops at 254 levels
        response = await upload(http, bearer, CONTENT, path="/v1/hsm/intents/import", intent=intent)
        assert_refused(response, "intent", words)


async def test_operation_id_and_history_user_with_nul_are_400(
    http: httpx.AsyncClient, client_ids: itertools.count[int]
) -> None:
    bearer = auth(token(next(client_ids), permissions=(CREATE, ADMIN)))
    announced = await http.post("/v1/uploads", json=ANNOUNCED, headers=bearer)
    assert announced.status_code == 201, announced.text
    job_id = announced.json()["job"]["id"]
    started = await http.post(
        f"/v1/imports/{job_id}/start", json={"operation_id": "op\x00"}, headers=bearer
    )
    assert_refused(started, "operation_id")
    history = await http.get("/v1/imports", params={"user_id": "a\x00"}, headers=bearer)
    assert_refused(history, "user_id")
